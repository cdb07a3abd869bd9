"""Release 0.11.0: one of each mechanism.

* evolution: ``mz_tables`` gains ``source_id``; ``mz_cluster_replicas.config`` gains
  ``disk_limit`` (old rows read the new columns as null);
* replacement: ``mz_cluster_replica_statuses.status`` turns from a code into a name (its history
  is dropped);
* rewrite: ``mz_roles.id`` turns from a number into a string (every row transformed); its
  inverse carries the rows 0.11.0 writes back to 0.10.0 if the upgrade is rolled back.
"""

import _schemas as s
from _transforms import role_ids_to_numbers, role_ids_to_strings
from v0_10_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "0.11.0"

RELEASE = Release(
    version=V,
    builtins=s.updated(
        PREVIOUS.builtins,
        {
            "mz_catalog.mz_tables": s.MZ_TABLES_V0_11,
            "mz_catalog.mz_cluster_replicas": s.MZ_CLUSTER_REPLICAS_V0_11,
            "mz_catalog.mz_roles": s.MZ_ROLES_V0_11,
            "mz_internal.mz_cluster_replica_statuses": s.MZ_CLUSTER_REPLICA_STATUSES_V0_11,
        },
    ),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_tables", "table", Mechanism.EVOLUTION),
        Migration(V, "mz_catalog", "mz_cluster_replicas", "table", Mechanism.EVOLUTION),
        Migration(
            V,
            "mz_catalog",
            "mz_roles",
            "table",
            Mechanism.REWRITE,
            transform=role_ids_to_strings,
            inverse=role_ids_to_numbers,
        ),
        Migration(V, "mz_internal", "mz_cluster_replica_statuses", "source", Mechanism.REPLACEMENT),
    ],
)
