"""Test and development machinery shipped with the package, the way kazoo ships
``kazoo.testing``: real servers and real processes, never mocks.

* :mod:`~orchestrator.testing.zkserver`: an embedded ZooKeeper server
  (``catalog-upgrade zookeeper``);
* :mod:`~orchestrator.testing.ensemble`: a ZooKeeper ensemble of several such servers;
* :mod:`~orchestrator.testing.sparkcluster`: a Spark standalone cluster
  (``catalog-upgrade spark-cluster``);
* :mod:`~orchestrator.testing.harness`: real ``catalog-upgrade sidecar`` child processes;
* :mod:`~orchestrator.testing.forkserver`: those children forked from one that imported once;
* :mod:`~orchestrator.testing.demo`: the blue-green demo (``make demo``).
"""
