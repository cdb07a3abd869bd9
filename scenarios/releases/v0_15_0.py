"""Release 0.15.0: builds on the 0.14.1 patch line.

* new builtin ``mz_catalog.mz_network_policies``;
* replacement of ``mz_compute_frontiers`` (timestamps become ``numeric(20)``);
* evolutions of ``mz_roles`` (a nested struct column, after 0.11.0's rewrite) and of
  ``mz_cluster_replica_metrics_history``.
"""

import _schemas as s
from v0_14_1 import RELEASE as PREVIOUS

from catalog.release import Builtin, Mechanism, Migration, Release

V = "0.15.0"

RELEASE = Release(
    version=V,
    builtins=[
        *s.updated(
            PREVIOUS.builtins,
            {
                "mz_introspection.mz_compute_frontiers": s.MZ_COMPUTE_FRONTIERS_V0_15,
                "mz_catalog.mz_roles": s.MZ_ROLES_V0_15,
                "mz_internal.mz_cluster_replica_metrics_history": (
                    s.MZ_CLUSTER_REPLICA_METRICS_HISTORY_V0_15
                ),
            },
        ),
        Builtin("mz_catalog", "mz_network_policies", "table", "s18", s.MZ_NETWORK_POLICIES_V0_15),
    ],
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_introspection", "mz_compute_frontiers", "log", Mechanism.REPLACEMENT),
        Migration(V, "mz_catalog", "mz_roles", "table", Mechanism.EVOLUTION),
        Migration(
            V, "mz_internal", "mz_cluster_replica_metrics_history", "source", Mechanism.EVOLUTION
        ),
    ],
)
