"""ZooKeeper from the processes' side: clients, their credentials and TLS, and the quorum.

:mod:`~orchestrator.zookeeper.clients` connects (every client of the product is made there),
:mod:`~orchestrator.zookeeper.credentials` holds the digest credentials and ACLs,
:mod:`~orchestrator.zookeeper.tls` the client's TLS, and :mod:`~orchestrator.zookeeper.quorum`
says why an ensemble does not answer.
"""
