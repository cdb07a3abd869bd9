"""Where the upgrade is now, as an operator reads it at 3 a.m.: from which version to which, its
stage, the long step under way and the next command to run.

Made from the ``status --json`` document itself (:meth:`UpgradeStatus.to_json` adds it as
``upgrade``), so the CLI, the sidecar's page and any script read the same answer. Stages:

============  ==============================================  ===========================
stage         means                                           next
============  ==============================================  ===========================
empty         no release has bootstrapped the environment     start the first release
checking      a newer generation checks (and copies) its      wait: it gets ready
              migration, read-only
ready         a newer generation is ready to take over        ``promote``
refused       a newer generation's release was refused        fix the release (its refusal
              (and none newer checks)                         names the rule and the fix)
migrating     the promoted leader migrates                    wait: it serves
pending       promoted; the old release may still come back   ``finalize``, or the two
                                                              ``rollback`` commands
finalizing    decided; the serving leader completes it        wait
final         nothing under way                               none
============  ==============================================  ===========================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.status.commands import command

__all__ = ["upgrade_stage"]

_GREEN = ("starting", "checking", "ready")


def upgrade_stage(document: Mapping[str, Any]) -> dict[str, Any]:
    """The ``upgrade`` part of a status document: ``stage``, ``from_version``, ``to_version``,
    ``deploy_generation`` (of the target), ``step`` (the long step's progress, if one runs) and
    ``next`` (the command to run, None when there is only to wait or nothing to do); a
    ``refused`` stage adds ``why``, ``rule`` and ``fix`` from the refusal, a ``pending`` one
    ``rollback`` (the commands that bring the previous release back)."""
    environment, zk = str(document.get("environment")), document.get("zookeeper")
    catalog = document.get("catalog") or {}
    version, generation = catalog.get("version"), catalog.get("deploy_generation") or 0
    if not document.get("bootstrapped"):
        return _stage("empty", None, None, None, None, "start a sidecar of the first release "
                      "with --auto-promote: it bootstraps the environment")
    processes: Sequence[Mapping[str, Any]] = document.get("processes") or []
    leader = document.get("leader") or {}
    if leader.get("registered") and leader.get("state") == "migrating":
        return _stage("migrating", version, leader.get("version"), leader.get("deploy_generation"),
                      leader.get("progress"), None)
    green = [
        p for p in processes
        if (p.get("deploy_generation") or 0) > generation and p.get("state") in _GREEN
    ]
    if green:
        target = max(p["deploy_generation"] for p in green)
        members = [p for p in green if p["deploy_generation"] == target]
        step = next((p["progress"] for p in members if p.get("progress")), None)
        if any(p.get("state") == "ready" for p in members):
            return _stage("ready", version, members[0].get("version"), target, step,
                          command(environment, zk, "promote", "--deploy-generation",
                                  str(target)))
        return _stage("checking", version, members[0].get("version"), target, step, None)
    # A refused process exits: its refusal stays in the events (kind "failed").
    events: Sequence[Mapping[str, Any]] = document.get("events") or []
    refused = [
        p for p in [*processes, *(e for e in events if e.get("kind") == "failed")]
        if (p.get("deploy_generation") or 0) > generation and p.get("state", "failed") == "failed"
    ]
    if refused:
        target = max(p["deploy_generation"] for p in refused)
        release = next(p for p in refused if p["deploy_generation"] == target)
        stage = _stage("refused", version, release.get("version"), target, None, None)
        error = release.get("error") or {}
        if isinstance(error, Mapping):  # why, and its fix, where the operator looks first
            stage["why"] = error.get("message")
            stage["rule"] = error.get("rule") or error.get("reason")
            stage["fix"] = error.get("suggestion")
        return stage
    finalization = document.get("finalization") or {}
    upgrade = finalization.get("upgrade") or {}
    state = finalization.get("state")
    if state in ("pending", "finalizing"):
        to = upgrade.get("version") or version
        finalize = (
            command(environment, zk, "finalize", "--version", str(to))
            if state == "pending"
            else None
        )
        stage = _stage(state, upgrade.get("from_version"), to, generation, None, finalize)
        if state == "pending" and upgrade.get("from_version"):
            stage["rollback"] = _rollback(document, str(upgrade["from_version"]), str(to))
        return stage
    return _stage("final", None, version, generation, None, None)


def _rollback(document: Mapping[str, Any], back: str, now: str) -> list[str]:
    """The two commands that roll a pending upgrade back (docs/operating.md, "Rolling back"):
    start the previous release at a generation newer than any in use, with
    ``--rollback-from`` the release now serving, then promote that generation. The release
    files are the operator's (named by placeholders a shell refuses as they are); the sidecar
    needs the options its sidecars run with too."""
    environment, zk = str(document.get("environment")), document.get("zookeeper")
    catalog = document.get("catalog") or {}
    used = [catalog.get("deploy_generation") or 0, catalog.get("promotion_target") or 0]
    used += [p.get("deploy_generation") or 0 for p in document.get("processes") or []]
    generation = str(max(used) + 1)
    return [
        command(environment, zk, "sidecar", "--deploy-generation", generation,
                "--release", f"<{back} release file>", "--rollback-from",
                f"<{now} release file>"),
        command(environment, zk, "promote", "--deploy-generation", generation, "--wait", "60"),
    ]  # fmt: skip


def _stage(
    stage: str,
    from_version: str | None,
    to_version: str | None,
    deploy_generation: int | None,
    step: Mapping[str, Any] | None,
    command: str | None,
) -> dict[str, Any]:
    return {
        "stage": stage,
        "from_version": from_version,
        "to_version": to_version,
        "deploy_generation": deploy_generation,
        "step": None if step is None else dict(step),
        "next": command,
    }
