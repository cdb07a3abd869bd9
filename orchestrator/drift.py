"""Drift: does the environment still match the release an operator thinks it runs?

:func:`check_drift` compares what ZooKeeper holds (the catalog and every shard it names) with a
release: the catalog's version; for every builtin, its collection in the catalog, its name, the
fingerprint of the schema the catalog records for it and of the latest schema registered on its
shard, the shard being live, and contractions still owed; and collections the catalog holds
that the release does not know. Each difference is a :class:`Drift` with a stable ``kind``.
``catalog-upgrade drift --release FILE`` prints them and exits 4 when there is any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from catalog.consensus import Consensus
from catalog.environment import CatalogState, read_catalog
from catalog.pending import PendingUpgrade, read_pending
from catalog.release import Release
from catalog.schema import fingerprint
from catalog.shard import ShardState, read_states

__all__ = ["Drift", "DriftReport", "check_drift", "collection_rows", "environment_drifts"]


@attrs.frozen
class Drift:
    """One difference: its ``kind``, the collection (None for the catalog itself), what the
    release expects and what the environment holds."""

    kind: str
    collection: str | None
    expected: str | None
    found: str | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class CollectionRow:
    """One builtin of the release as the environment holds it."""

    name: str
    global_id: str
    shard_id: str | None
    mechanism: str | None  # the release's own instruction for it, if any
    fingerprint: str  # of the release's schema
    registered: str | None  # of the shard's latest registered schema
    contraction_owed: bool

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class DriftReport:
    release: str
    catalog_version: str | None
    collections: tuple[CollectionRow, ...]
    drifts: tuple[Drift, ...]

    @property
    def ok(self) -> bool:
        return not self.drifts

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "release": self.release,
            "catalog_version": self.catalog_version,
            "drifts": [d.to_json() for d in self.drifts],
            "collections": [c.to_json() for c in self.collections],
        }


def check_drift(consensus: Consensus, release: Release) -> DriftReport:
    """Compare the environment of ``consensus`` with ``release`` (reads only)."""
    found = read_catalog(consensus)
    version = str(release.version)
    if found is None:
        drift = Drift("no-catalog", None, version, None, "the environment has no catalog yet")
        return DriftReport(version, None, (), (drift,))
    catalog = found[0]
    drifts: list[Drift] = []
    if catalog.version != version:
        drifts.append(
            Drift("version", None, version, catalog.version,
                  f"the catalog is at {catalog.version}, the release is {version}")
        )  # fmt: skip
    states = read_states(consensus, sorted(catalog.shard_ids()))
    # An upgrade to this release still pending owes its contractions until it is final: that
    # is its window, not drift.
    found_pending = read_pending(consensus)
    window = found_pending is not None and found_pending[0].version == version
    mechanisms: Mapping[str, str] = {
        m.name: m.mechanism.value for m in release.migrations if m.version == release.version
    }
    rows = []
    for builtin in release.builtins:
        expected = fingerprint(builtin.schema)
        ref = catalog.collections.get(builtin.global_id)
        if ref is None:
            drifts.append(
                Drift("missing-collection", builtin.name, builtin.global_id, None,
                      f"{builtin.name} ({builtin.global_id}) is not in the catalog")
            )  # fmt: skip
            rows.append(
                CollectionRow(builtin.name, builtin.global_id, None,
                              mechanisms.get(builtin.name), expected, None, False)
            )  # fmt: skip
            continue
        if ref.name != builtin.name:
            drifts.append(
                Drift("name", builtin.name, builtin.name, ref.name,
                      f"{builtin.global_id} is {ref.name} in the catalog, {builtin.name} in "
                      "the release")
            )  # fmt: skip
        if ref.fingerprint != expected:
            drifts.append(
                Drift("schema", builtin.name, expected[:12], ref.fingerprint[:12],
                      f"the catalog records another schema for {builtin.name} than the "
                      "release's")
            )  # fmt: skip
        state = states.get(ref.shard_id)
        drifts.extend(_shard_drifts(builtin.name, ref.shard_id, state, version if window else None))
        live = state if state is not None and not (state.finalized or state.sealed) else None
        registered = None if live is None else fingerprint(live.live_schema)
        owed = live is not None and live.contraction is not None
        rows.append(
            CollectionRow(builtin.name, builtin.global_id, ref.shard_id,
                          mechanisms.get(builtin.name), expected, registered, owed)
        )  # fmt: skip
    known = {b.global_id for b in release.builtins}
    for global_id, ref in sorted(catalog.collections.items()):
        if global_id not in known:
            drifts.append(
                Drift("unknown-collection", ref.name, None, global_id,
                      f"the catalog holds {ref.name} ({global_id}), which the release does not "
                      "know")
            )  # fmt: skip
    return DriftReport(version, catalog.version, tuple(rows), tuple(drifts))


def _shard_drifts(
    name: str, shard_id: str, state: ShardState | None, window: str | None
) -> list[Drift]:
    """What is wrong with the shard ``shard_id`` the catalog names for ``name``: it is not
    live, or it owes a contraction that is not the window of the pending upgrade to
    ``window``."""
    if state is None or state.finalized or state.sealed:
        why = "missing" if state is None else "finalized" if state.finalized else "sealed"
        return [Drift("shard", name, "live", why, f"the shard {shard_id} of {name} is {why}")]
    contraction = state.contraction
    if contraction is not None and not (window is not None and contraction.of(window)):
        return [
            Drift("owed-contraction", name, None, "owed",
                  f"{name} still owes a contraction (an upgrade did not finish its contract "
                  "step)")
        ]  # fmt: skip
    return []


def environment_drifts(
    catalog: CatalogState, states: Mapping[str, ShardState | None], pending: PendingUpgrade | None
) -> tuple[Drift, ...]:
    """The drift no release explains, from what a read-only check has already read: every
    catalog collection whose shard is not live or owes a contraction that is not the pending
    upgrade's window. A green process reports these before its promotion (its plan assumes a
    live shard at the catalog's schema for every collection)."""
    window = pending.version if pending is not None else None
    return tuple(
        drift
        for _gid, ref in sorted(catalog.collections.items())
        for drift in _shard_drifts(ref.name, ref.shard_id, states.get(ref.shard_id), window)
    )


def collection_rows(consensus: Consensus) -> dict[str, int]:
    """Every catalog collection's update rows (from its shard's state: no batch is read)."""
    found = read_catalog(consensus)
    if found is None:
        return {}
    catalog = found[0]
    states = read_states(consensus, sorted(catalog.shard_ids()))
    return {
        ref.name: state.row_count
        for ref in catalog.collections.values()
        if (state := states.get(ref.shard_id)) is not None
    }
