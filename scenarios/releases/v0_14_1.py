"""Release 0.14.1 (patch): ``mz_clusters`` gains ``disk``; 0.15.0 carries it forward."""

import _schemas as s
from v0_14_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "0.14.1"

RELEASE = Release(
    version=V,
    builtins=s.updated(PREVIOUS.builtins, {"mz_catalog.mz_clusters": s.MZ_CLUSTERS_V0_14_1}),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_clusters", "table", Mechanism.EVOLUTION),
    ],
)
