"""What ``validate`` finds, by category: the categories CI chooses from (``--fail-on``), the
category of each path failure's reason, and the instructions whose cost depends on the data."""

from __future__ import annotations

from typing import Any

import attrs

from catalog.release.manifest import Mechanism
from catalog.release.version import Version

__all__ = ["ADVISORY", "CATEGORIES", "DataCost", "category_of"]

#: The categories of validation findings (``validate --fail-on``); a failure's ``reason`` maps to
#: one, ``data-dependent-cost`` marks instructions whose cost depends on the data (a REWRITE
#: copies every row; a REPLACEMENT starts the collection empty) and ``version-bump`` a release
#: numbered below what its changes require (:mod:`catalog.release.levels`).
CATEGORIES = (
    "missing-instruction",
    "incompatible-evolution",
    "removed-instruction",
    "backport",
    "invalid-release",
    "data-dependent-cost",
    "version-bump",
)
#: The categories that do not block unless ``--fail-on`` names them: advice, not failures.
ADVISORY = frozenset({"data-dependent-cost", "version-bump"})
_CATEGORIES_OF_REASONS = {
    "missing-instruction": "missing-instruction",
    "incompatible-evolution": "incompatible-evolution",
    "instruction-removed": "removed-instruction",
    "backport": "backport",
}


@attrs.frozen
class DataCost:
    """An instruction whose cost depends on the collection's data: a REWRITE copies (and
    transforms) every row, a REPLACEMENT leaves the collection empty."""

    version: Version
    collection: str
    mechanism: Mechanism
    # The collection's update rows in an environment, when one was given (``validate --rows``).
    rows: int | None = attrs.field(default=None, eq=False)

    def finding(self) -> dict[str, Any]:
        rewrite = self.mechanism is Mechanism.REWRITE
        return {
            "category": "data-dependent-cost",
            "rule": self.mechanism.value,
            "releases": [str(self.version)],
            "collection": self.collection,
            "path": None,
            "rows": self.rows,
            "message": (
                f"{self.version} {'rewrites' if rewrite else 'replaces'} {self.collection}: "
                + (
                    "every row is copied through its transform"
                    if rewrite
                    else "its rows are not carried over"
                )
            ),
            "fix": (
                "expect the copy's time in the read-only check (--engine spark for large shards)"
                if rewrite
                else "make sure the collection's rows need not survive the upgrade"
            ),
        }


def category_of(reason: str) -> str:
    """The finding category of a path failure's ``reason`` (``invalid-release`` for the rest)."""
    return _CATEGORIES_OF_REASONS.get(reason, "invalid-release")
