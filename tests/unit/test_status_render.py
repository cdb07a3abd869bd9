"""orchestrator.status without ZooKeeper: the JSON contract, table rendering, field parsing."""

from __future__ import annotations

from typing import Any

import attrs
from rich.console import Console

import orchestrator.status as status_module
from catalog.consensus import Fence, Versioned, encode_json
from catalog.shard import SchemaUse, ShardCoverage
from orchestrator.election import EpochInfo, Leadership
from orchestrator.render.coverage import render_coverage
from orchestrator.render.status import render_table
from orchestrator.status import (
    CatalogSummary,
    CollectionStatus,
    LeaderStatus,
    MigrationEntry,
    ProcessStatus,
    UpgradeEvent,
    UpgradeStatus,
    plan_mechanisms,
    schema_id_of,
)
from orchestrator.status.coverage import CollectionCoverage, CoverageReport

NOW = 1_800_000_000.0


def text_of(status: UpgradeStatus, **options: Any) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_table(status, now=NOW, **options))
    return console.export_text()


def empty_status() -> UpgradeStatus:
    return UpgradeStatus(
        environment="prod",
        catalog=CatalogSummary(
            version=None, deploy_generation=None, epoch=None, promotion_target=None
        ),
        bootstrapped=False,
        leader=None,
        processes=(),
        collections=(),
        migration_entries=(),
        pending_finalization=(),
        events=(),
        read_at=NOW,
    )


def big_status(count: int = 1000) -> UpgradeStatus:
    epoch = EpochInfo(
        epoch=4,
        leader="p-lead",
        deploy_generation=3,
        session="0xabc",
        version=3,
        host="h1",
        pid=42,
        taken_over_at=NOW - 30,
    )
    leader = ProcessStatus(
        id="p-lead",
        version="0.12.0",
        deploy_generation=3,
        mode="leader",
        state="migrating",
        phase="switching collections",
        phase_since=NOW - 5,
        host="h1",
        pid=42,
        session="0xabc",
        epoch=4,
        plan={"migrations": []},
    )
    failed = ProcessStatus(
        id="p-old",
        version="0.11.0",
        deploy_generation=2,
        mode="read-only",
        state="fenced",
        error={"error": "FencedError", "message": "catalog at generation 3", "exit_code": 3},
    )
    collections = tuple(
        CollectionStatus(
            global_id=f"s{i}",
            name=f"mz_catalog.t{i:04d}",
            shard_id=f"sh-{i}",
            schema_id=i % 3,
            mechanism="evolution" if i % 2 else "replacement",
        )
        for i in range(count)
    )
    return UpgradeStatus(
        environment="prod",
        catalog=CatalogSummary(
            version="0.11.0",
            deploy_generation=3,
            epoch=4,
            promotion_target=3,
            blob_uri="file:///blobs",
            collections=count,
        ),
        bootstrapped=True,
        leader=LeaderStatus(epoch=epoch, process=leader),
        processes=(failed, leader),
        collections=collections,
        migration_entries=(MigrationEntry("s1", "0.12.0", 3, "sh-new-1"),),
        pending_finalization=("sh-gone",),
        events=(
            UpgradeEvent(seq=7, kind="promoted", at=NOW - 60, fields={"deploy_generation": 3}),
        ),
        read_at=NOW,
        plan_source="p-lead",
    )


def test_public_names() -> None:
    """The status package exports the model and its readers; rendering lives apart."""
    assert {"read_status", "record_event", "UpgradeStatus"} <= set(status_module.__all__)
    assert "render_table" not in status_module.__all__


def test_empty_environment_json_has_nulls() -> None:
    """An unbootstrapped environment is the section 8 object with nulls and empty lists."""
    document = empty_status().to_json()
    assert document["catalog"]["version"] is None
    assert document["catalog"]["deploy_generation"] is None
    assert document["catalog"]["epoch"] is None
    assert document["leader"] is None
    for field in ("processes", "collections", "migration_entries", "pending_finalization"):
        assert document[field] == []
    assert document["bootstrapped"] is False


def test_empty_environment_renders_one_clear_line() -> None:
    """The table view of an empty environment says so (and nothing about collections)."""
    text = text_of(empty_status())
    assert "environment prod is empty (not bootstrapped)" in text
    assert "collections" not in text


def test_json_contract_fields() -> None:
    """Every field docs/design-contract.md names is present, with the leader as a process."""
    document = big_status(3).to_json()
    assert set(document["catalog"]) >= {"version", "deploy_generation", "epoch"}
    leader = document["leader"]
    assert (leader["id"], leader["epoch"], leader["session"], leader["host"], leader["pid"]) == (
        "p-lead",
        4,
        "0xabc",
        "h1",
        42,
    )
    for process in document["processes"]:
        assert set(process) >= {
            "id",
            "version",
            "deploy_generation",
            "mode",
            "state",
            "plan",
            "error",
            "phase",
            "phase_since",
        }
    assert set(document["collections"][0]) >= {"global_id", "name", "shard_id", "schema_id"}
    assert document["migration_entries"] == [
        {"global_id": "s1", "version": "0.12.0", "deploy_generation": 3, "shard_id": "sh-new-1"}
    ]
    assert document["pending_finalization"] == ["sh-gone"]
    assert document["events"][0]["kind"] == "promoted"


def test_thousand_collections_show_counts_and_first_rows() -> None:
    """With 1,000 collections the table counts per mechanism and lists only the first 20."""
    text = text_of(big_status())
    assert "evolution: 500, replacement: 500" in text
    assert "0: 334, 1: 333, 2: 333" in text
    assert "mz_catalog.t0019" in text and "mz_catalog.t0020" not in text
    assert "980 more" in text


def test_all_rows_lists_every_collection() -> None:
    """--all lists every collection."""
    text = text_of(big_status(), all_rows=True)
    assert "mz_catalog.t0999" in text


def test_processes_show_state_phase_age_and_error() -> None:
    """Each process row shows its state, phase with its age, and its error's reason."""
    text = text_of(big_status(3))
    assert "switching collections" in text and "5s ago" in text
    assert "catalog at generation 3" in text
    assert "p-lead (generation 3, epoch 4, session 0xabc" in text


def test_schema_id_from_shard_state() -> None:
    """The schema id is the number of registered schemas minus one; unknown shapes give None."""
    assert schema_id_of({"schemas": ["a", "b", "c"]}) == 2
    assert schema_id_of({"schema_count": 1}) == 0
    assert schema_id_of({"schemas": []}) is None
    assert schema_id_of(None) is None
    assert schema_id_of("garbage") is None


def test_plan_mechanisms_shapes() -> None:
    """Mechanisms are found by global id and by name in the plan shapes status accepts."""
    listed = {"migrations": [{"global_id": "s1", "name": "a.b", "mechanism": "rewrite"}]}
    assert plan_mechanisms(listed) == {"s1": "rewrite", "a.b": "rewrite"}
    mapped = {"collections": {"s2": {"mechanism": "evolution"}, "s3": "replacement"}}
    assert plan_mechanisms(mapped) == {"s2": "evolution", "s3": "replacement"}
    assert plan_mechanisms(None) == {} and plan_mechanisms(["x"]) == {}


def test_epoch_info_and_leadership_values() -> None:
    """EpochInfo parses the epoch znode; a hand-built Leadership has no guard and checks freely."""
    found = Versioned(
        encode_json({"epoch": 2, "leader": "p", "deploy_generation": 5, "session": "0x1"}), 7
    )
    info = EpochInfo.from_versioned(found)
    assert info is not None and (info.epoch, info.leader, info.version) == (2, "p", 7)
    leadership = Leadership("p", 5, 2, Fence("epoch", 7))
    leadership.check()
    assert leadership == Leadership("p", 5, 2, Fence("epoch", 7), guard=lambda wait: None)


def test_the_process_table_stays_readable_at_80_columns_and_below() -> None:
    """At 80 columns the optional columns (session, host/pid) give way and every value of the
    others is whole; narrower still, one block per process; wide, every column."""
    status = big_status(3)

    def at(width: int) -> str:
        console = Console(record=True, width=width, color_system=None)
        console.print(render_table(status, now=NOW))
        return console.export_text()

    wide = at(200)
    assert "session" in wide and "host/pid" in wide and "0xabc" in wide
    narrow = at(80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    processes = narrow[narrow.index("processes (") : narrow.index("collections (")]
    header = processes.split("\n")[2]
    assert "┃ id" in header and "session" not in header and "0xabc" not in processes
    for value in ("p-lead", "0.12.0", "migrating", "leader", "read-only", "p-old", "0.11.0"):
        assert value in processes, (value, processes)
    tiny = at(50)
    assert max(len(line) for line in tiny.splitlines()) <= 50
    blocks = tiny[tiny.index("processes (") :]
    assert "p-lead\n  version: 0.12.0" in blocks and "  state: migrating" in blocks


def test_collections_and_entries_never_cut_an_identifier_at_80_columns() -> None:
    """At 80 columns a collection's shard gives way (the entries table names it whole) and a
    long name wraps; wide, every column shows; a list cut to its first rows says so, the
    migration entries too."""
    long_name = "mz_internal.mz_aws_privatelink_connection_status_history"
    shard = "ae8a0254c5ed440fb66e02092aec257d"
    base = big_status(30)
    status = attrs.evolve(
        base,
        collections=(
            attrs.evolve(base.collections[0], name=long_name, shard_id=shard),
            *base.collections[1:],
        ),
        migration_entries=tuple(
            MigrationEntry(f"s{i}", "0.12.0", 3, f"{i:032x}") for i in range(25)
        ),
    )

    def at(width: int, **options: Any) -> str:
        console = Console(record=True, width=width, color_system=None)
        console.print(render_table(status, now=NOW, **options))
        return console.export_text()

    narrow = at(80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    listed = narrow[narrow.index("collections (first") : narrow.index("migration shard")]
    assert "shard" not in listed.split("\n")[2] and shard not in listed
    assert "mz_internal.mz_aws_privatelink" in listed and "mz_catalog.t0019" in listed
    entries = narrow[narrow.index("migration shard entries") :]
    assert entries.startswith("migration shard entries (first 20; --all shows 5 more)")
    assert f"{19:032x}" in entries and f"{20:032x}" not in entries
    wide = at(200, all_rows=True)
    assert shard in wide and long_name in wide and f"{24:032x}" in wide
    assert "migration shard entries (first" not in wide


def test_coverage_stays_readable_at_80_columns() -> None:
    """``status --coverage`` at 80 columns: ``needed`` gives way, the free-text columns wrap,
    a collection's name stays whole where it fits; a cut list says how many more there are;
    wide, every column shows."""
    pending = CollectionCoverage(
        "mz_catalog.mz_tables", "u1",
        ShardCoverage("sh-1", (SchemaUse(0, batches=3, rows=3, readers=1), SchemaUse(1, 1, 1))),
    )  # fmt: skip
    done = CollectionCoverage("mz_catalog.mz_roles", "s10", ShardCoverage("sh-2", (SchemaUse(0),)))
    report = CoverageReport((done, *[pending] * 25))

    def at(width: int, **options: Any) -> str:
        console = Console(record=True, width=width, color_system=None)
        console.print(render_coverage(report, **options))
        return console.export_text()

    narrow = at(80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    header = narrow[: narrow.index("┡")]
    assert "needed" not in header and "can retire" in header
    assert "│ mz_catalog.mz_tables " in narrow and "│ 0: 3/3, 1: 1/1 " in narrow
    assert narrow.rstrip().endswith("6 more collection(s): --all shows every one")
    wide = at(200, all_rows=True)
    assert "needed" in wide and "mz_catalog.mz_roles" in wide and "more collection" not in wide


def test_values_are_shown_as_written_never_read_as_markup() -> None:
    """A value that looks like rich markup (a closing tag with nothing to close would raise)
    is shown as written: in the catalog, the events, the pending finalizations and the
    processes' errors."""
    markup = "[/oops] [bold]x"
    base = big_status(3)
    status = attrs.evolve(
        base,
        catalog=attrs.evolve(base.catalog, blob_uri=f"file:///blobs/{markup}"),
        events=(UpgradeEvent(seq=8, kind="refused", at=NOW - 5, fields={"reason": markup}),),
        pending_finalization=(markup,),
        processes=(attrs.evolve(base.processes[0], error={"error": "E", "message": markup}),),
    )
    text = text_of(status)
    assert f"file:///blobs/{markup}" in text and f"reason={markup}" in text
    assert f"│ {markup} " in text and f"E: {markup}" in text
