"""Release 1.0.0: the stable line.

* evolutions of ``mz_databases``, ``mz_functions`` and the retained privatelink history;
* ``mz_cluster_replica_statuses`` replaced again (``reason`` becomes a struct);
* ``mz_storage_usage_by_shard`` (``retain_data``) rewritten: sizes become signed.
"""

import _schemas as s
from _transforms import signed_sizes
from v0_15_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "1.0.0"

RELEASE = Release(
    version=V,
    builtins=s.updated(
        PREVIOUS.builtins,
        {
            "mz_catalog.mz_databases": s.MZ_DATABASES_V1_0,
            "mz_catalog.mz_functions": s.MZ_FUNCTIONS_V1_0,
            "mz_internal.mz_aws_privatelink_connection_status_history": (
                s.MZ_AWS_PRIVATELINK_CONNECTION_STATUS_HISTORY_V1_0
            ),
            "mz_internal.mz_cluster_replica_statuses": s.MZ_CLUSTER_REPLICA_STATUSES_V1_0,
            "mz_internal.mz_storage_usage_by_shard": s.MZ_STORAGE_USAGE_BY_SHARD_V1_0,
        },
    ),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_catalog", "mz_databases", "table", Mechanism.EVOLUTION),
        Migration(V, "mz_catalog", "mz_functions", "table", Mechanism.EVOLUTION),
        Migration(
            V,
            "mz_internal",
            "mz_aws_privatelink_connection_status_history",
            "source",
            Mechanism.EVOLUTION,
        ),
        Migration(V, "mz_internal", "mz_cluster_replica_statuses", "source", Mechanism.REPLACEMENT),
        Migration(
            V,
            "mz_internal",
            "mz_storage_usage_by_shard",
            "table",
            Mechanism.REWRITE,
            transform=signed_sizes,
        ),
    ],
)
