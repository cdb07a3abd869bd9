"""Release 0.11.1 (patch): ``mz_source_statuses`` gains structured ``error_details``.

Cut before 0.12.0, so 0.12.0 carries this instruction forward (a backport that a later minor
release lacked would break the path 0.11.1 -> 0.12.0; ``validate`` reports that).
"""

import _schemas as s
from v0_11_0 import RELEASE as PREVIOUS

from catalog.release import Mechanism, Migration, Release

V = "0.11.1"

RELEASE = Release(
    version=V,
    builtins=s.updated(
        PREVIOUS.builtins, {"mz_internal.mz_source_statuses": s.MZ_SOURCE_STATUSES_V0_11_1}
    ),
    previous=PREVIOUS,
    migrations=[
        *PREVIOUS.migrations,
        Migration(V, "mz_internal", "mz_source_statuses", "source", Mechanism.EVOLUTION),
    ],
)
