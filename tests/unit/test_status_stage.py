"""Where the upgrade is now (orchestrator.status.stage), from status documents of each stage."""

from __future__ import annotations

from typing import Any

from orchestrator.status.stage import upgrade_stage

SERVING = {"id": "blue", "version": "0.10.0", "deploy_generation": 1, "state": "serving",
           "registered": True}  # fmt: skip


def document(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "environment": "ops2",
        "zookeeper": "127.0.0.1:2181",
        "bootstrapped": True,
        "catalog": {"version": "0.10.0", "deploy_generation": 1},
        "leader": SERVING,
        "processes": [SERVING],
        "finalization": {"state": "final", "upgrade": None},
    }
    return {**base, **fields}


def green(state: str, **fields: Any) -> dict[str, Any]:
    return {"id": "green", "version": "0.11.0", "deploy_generation": 2, "state": state, **fields}


def test_each_stage_names_its_versions_and_its_next_command() -> None:
    empty = upgrade_stage({"bootstrapped": False, "catalog": {}})
    assert empty["stage"] == "empty" and "--auto-promote" in empty["next"]

    final = upgrade_stage(document())
    assert (final["stage"], final["to_version"], final["next"]) == ("final", "0.10.0", None)

    copying = {"step": "rewrite", "collection": "mz_roles", "rows_done": 5, "rows_total": 10}
    checking = upgrade_stage(document(processes=[SERVING, green("checking", progress=copying)]))
    assert (checking["stage"], checking["from_version"], checking["to_version"]) == (
        "checking", "0.10.0", "0.11.0",
    )  # fmt: skip
    assert checking["step"] == copying and checking["next"] is None

    ready = upgrade_stage(document(processes=[SERVING, green("ready"), green("checking")]))
    assert ready["stage"] == "ready" and ready["deploy_generation"] == 2
    assert ready["next"] == "catalog-upgrade promote --env ops2 --deploy-generation 2"

    leader = {**green("migrating"), "registered": True, "progress": copying}
    migrating = upgrade_stage(document(leader=leader, processes=[leader]))
    assert (migrating["stage"], migrating["to_version"], migrating["step"]) == (
        "migrating", "0.11.0", copying,
    )  # fmt: skip

    upgrade = {"version": "0.11.0", "from_version": "0.10.0"}
    pending = upgrade_stage(document(
        catalog={"version": "0.11.0", "deploy_generation": 2},
        finalization={"state": "pending", "upgrade": upgrade},
    ))  # fmt: skip
    assert (pending["stage"], pending["from_version"], pending["to_version"]) == (
        "pending", "0.10.0", "0.11.0",
    )  # fmt: skip
    assert pending["next"] == "catalog-upgrade finalize --env ops2 --version 0.11.0"
    finalizing = upgrade_stage(document(finalization={"state": "finalizing", "upgrade": upgrade}))
    assert finalizing["stage"] == "finalizing" and finalizing["next"] is None

    # A refused release of a newer generation: named, with nothing to run until it is fixed.
    refused = upgrade_stage(document(processes=[SERVING, green("failed")]))
    assert (refused["stage"], refused["to_version"], refused["next"]) == (
        "refused", "0.11.0", None,
    )  # fmt: skip
    assert upgrade_stage(document(processes=[SERVING, green("fenced")]))["stage"] == "final"
    event = {"kind": "failed", "deploy_generation": 2, "version": "0.11.0"}  # the process exited
    assert upgrade_stage(document(events=[event]))["stage"] == "refused"
    # The refusal's reason, rule and fix come with the stage (status shows them first).
    error = {"message": "mz_catalog.mz_tables changed without an instruction",
             "rule": "missing-instruction", "suggestion": "add a Migration for it"}
    why = upgrade_stage(document(events=[{**event, "error": error}]))
    assert (why["why"], why["rule"], why["fix"]) == (
        error["message"], "missing-instruction", "add a Migration for it",
    )  # fmt: skip
    final_since = document(catalog={"version": "0.12.0", "deploy_generation": 3}, events=[event])
    assert upgrade_stage(final_since)["stage"] == "final"  # a later upgrade went through


def test_a_command_names_the_ensemble_when_it_is_not_the_default() -> None:
    """Pasted from the status of an environment on another ensemble, a command acts there."""
    ready = upgrade_stage(
        document(zookeeper="zk1:2181,zk2:2181", environment="ops 2",
                 processes=[SERVING, green("ready")])
    )  # fmt: skip
    assert ready["next"] == (
        "catalog-upgrade promote --env 'ops 2' --zk zk1:2181,zk2:2181 --deploy-generation 2"
    )
