"""ZooKeeper from the processes' side: clients, their credentials and TLS, and the quorum.

:mod:`~orchestrator.zookeeper.clients` connects (every client of the product is made there),
:mod:`~orchestrator.zookeeper.credentials` holds the digest credentials and ACLs,
:mod:`~orchestrator.zookeeper.tls` the client's TLS, and :mod:`~orchestrator.zookeeper.quorum`
says why an ensemble does not answer.
"""

from typing import Final

#: The ZooKeeper connection string of every command and process without ``--zk``.
DEFAULT_ZK: Final = "127.0.0.1:2181"
