"""Release 0.13.0: deletions and a same-schema rewrite.

* ``mz_sources.size`` and ``mz_sinks.size`` are deleted (their names stay reserved: re-adding
  them later is refused);
* evolution inside the values of a map (``mz_connections.options{}.secret_id``);
* rewrite of ``mz_comments`` that only normalises data (the schema, and its fingerprint, stay);
* evolution of ``mz_cluster_replica_history``, new in 0.12.0.
"""

import _schemas as s
from _transforms import lowercase_object_types
from v0_12_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "0.13.0"

RELEASE = Release(
    version=V,
    builtins=s.updated(
        PREVIOUS.builtins,
        {
            "mz_catalog.mz_sources": s.MZ_SOURCES_V0_13,
            "mz_catalog.mz_sinks": s.MZ_SINKS_V0_13,
            "mz_catalog.mz_connections": s.MZ_CONNECTIONS_V0_13,
            "mz_internal.mz_cluster_replica_history": s.MZ_CLUSTER_REPLICA_HISTORY_V0_13,
        },
    ),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_sources", "table", Mechanism.EVOLUTION),
        Migration(V, "mz_catalog", "mz_sinks", "table", Mechanism.EVOLUTION),
        Migration(V, "mz_catalog", "mz_connections", "table", Mechanism.EVOLUTION),
        Migration(
            V,
            "mz_internal",
            "mz_comments",
            "table",
            Mechanism.REWRITE,
            transform=lowercase_object_types,
        ),
        Migration(V, "mz_internal", "mz_cluster_replica_history", "source", Mechanism.EVOLUTION),
    ],
)
