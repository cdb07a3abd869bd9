"""Release 0.12.0: builds on the 0.11.1 patch line.

* new builtin ``mz_internal.mz_cluster_replica_history`` (no shard until the leader creates it);
* evolution inside a list of structs (``mz_indexes.key[].nulls_last``);
* evolution of a ``retain_data`` history (``mz_statement_execution_history``: relax + add);
* replacement of ``mz_arrangement_sizes`` (signed counters become unsigned);
* evolution of ``mz_scheduling_elapsed``, which 0.14.0 removes.
"""

import _schemas as s
from v0_11_1 import RELEASE as PREVIOUS

from catalog.release import Builtin, Mechanism, Migration, Release

V = "0.12.0"

RELEASE = Release(
    version=V,
    builtins=[
        *s.updated(
            PREVIOUS.builtins,
            {
                "mz_catalog.mz_indexes": s.MZ_INDEXES_V0_12,
                "mz_internal.mz_statement_execution_history": (
                    s.MZ_STATEMENT_EXECUTION_HISTORY_V0_12
                ),
                "mz_introspection.mz_arrangement_sizes": s.MZ_ARRANGEMENT_SIZES_V0_12,
                "mz_introspection.mz_scheduling_elapsed": s.MZ_SCHEDULING_ELAPSED_V0_12,
            },
        ),
        Builtin(
            "mz_internal",
            "mz_cluster_replica_history",
            "source",
            "s31",
            s.MZ_CLUSTER_REPLICA_HISTORY_V0_12,
        ),
    ],
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_indexes", "table", Mechanism.EVOLUTION),
        Migration(
            V, "mz_internal", "mz_statement_execution_history", "source", Mechanism.EVOLUTION
        ),
        Migration(V, "mz_introspection", "mz_arrangement_sizes", "log", Mechanism.REPLACEMENT),
        Migration(V, "mz_introspection", "mz_scheduling_elapsed", "log", Mechanism.EVOLUTION),
    ],
)
