"""Release 0.14.0: a removed builtin and a rewrite of retained history.

* ``mz_introspection.mz_scheduling_elapsed`` is gone (the leader finalizes its shard);
* ``mz_session_history`` (``retain_data``) is rewritten: epoch millis become timestamps;
* evolutions of ``mz_tables`` and ``mz_types``.
"""

import _schemas as s
from _transforms import millis_to_timestamp
from v0_13_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "0.14.0"

RELEASE = Release(
    version=V,
    builtins=s.updated(
        s.removed(PREVIOUS.builtins, "mz_introspection.mz_scheduling_elapsed"),
        {
            "mz_internal.mz_session_history": s.MZ_SESSION_HISTORY_V0_14,
            "mz_catalog.mz_tables": s.MZ_TABLES_V0_14,
            "mz_catalog.mz_types": s.MZ_TYPES_V0_14,
        },
    ),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(
            V,
            "mz_internal",
            "mz_session_history",
            "source",
            Mechanism.REWRITE,
            transform=millis_to_timestamp,
        ),
        Migration(V, "mz_catalog", "mz_tables", "table", Mechanism.EVOLUTION),
        Migration(V, "mz_catalog", "mz_types", "table", Mechanism.EVOLUTION),
    ],
)
