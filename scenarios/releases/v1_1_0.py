"""Release 1.1.0: ``mz_clusters`` renames ``replication_factor`` to ``replica_count`` (widened
from uint32 to int64) and ``size`` to ``replica_size``, by EVOLUTION: the shard numbers its
fields, every stored row reads under the new names, nothing is rewritten."""

import _schemas as s
from v1_0_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "1.1.0"

RELEASE = Release(
    version=V,
    builtins=s.updated(PREVIOUS.builtins, {"mz_catalog.mz_clusters": s.MZ_CLUSTERS_V1_1}),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_clusters", "table", Mechanism.EVOLUTION),
    ],
)
