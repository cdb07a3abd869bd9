"""Materialize's randomized multi-version test of its builtin schema migration, ported to real
processes: ``test_builtin_schema_migration`` (``builtin_schema_migration_tests.rs``).

Per seed: 10 versions after the first, 5 builtins, 0 to 2 steps per version by any of our three
mechanisms, 0 to 3 processes per version (a version without processes is jumped over), in
order. Real sidecars against a real ZooKeeper: each version's processes start read-only, some
are SIGKILLed and restarted, some of the next version start early (they prepare from a catalog
that moves under them), the version is promoted (sometimes its new leader is SIGKILLed as it
takes over), rows are appended through the leader and read back.

Asserted, as the peer asserts: every ready process of a version agrees on its plan and shards
(``replacement-agreement``). Beyond it, this product's promises: every acknowledged row is
served exactly once, and what a replacement discarded stays discarded (``rows-never-lost``),
and every invariant of ``orchestrator.scenario.invariants`` after every action. The seed is
printed; ``TEST_PORT_SEEDS=7 make test`` (or ``1-50``) replays seeds. ``make test`` runs three
seeds that change with the commit. Some versions' processes are armed to crash at a random
fenced write of their takeover (the peer's random crash points); after each promotion, the
catalog's fingerprints are the release's (the peer's fingerprint agreement).
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from catalog.environment import read_catalog
from catalog.release import Release
from catalog.schema import fingerprint
from orchestrator.scenario import ScenarioRun, ZooKeeperTarget
from orchestrator.scenario.acting import acting_run
from orchestrator.scenario.format import ReleaseIndex
from orchestrator.scenario.invariants import describe
from orchestrator.scenario.simulate import SimulationConfig, appendable_collections
from orchestrator.scenario.simulate.moves import UpgradeMoves
from orchestrator.scenario.simulate.soak import soak_seeds
from orchestrator.scenario.simulate.walk_core import WalkModel
from support.histories import commit_seed, seeds_from_environment
from support.ported import ported_history, write_release_files
from support.zookeeper import ZooKeeperEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Three seeds that change with the commit (each printed, for a replay), or those named.
PORT_SEEDS = seeds_from_environment("TEST_PORT_SEEDS", default=tuple(soak_seeds(commit_seed(), 3)))
TIMEOUT = 40.0
KILL_PROBABILITY = 0.3  # a ready process of the version SIGKILLed and restarted
EARLY_PROBABILITY = 0.4  # the next version's processes started before this promotion
KILL_LEADER_PROBABILITY = 0.25  # the new leader SIGKILLed as it takes over
CRASH_POINT_PROBABILITY = 0.3  # the version's processes crash at random fenced writes
CRASH_WRITES = 6  # a crash point is drawn from the first this many fenced leader writes


def check(model: WalkModel, what: str, *, writes: bool) -> None:
    """Every invariant holds and no process exited unexpectedly."""
    found = model.checker.check(writes_expected=writes, rows=True)
    assert not found, f"{what}: {describe(found)}"
    assert not model.run.unexpected_exits(), f"{what}: {model.run.unexpected_exits()}"


def check_fingerprints(model: WalkModel, release: Release) -> None:
    """The peer's fingerprint agreement: every collection of the catalog the promoted version
    wrote has its builtin's schema fingerprint, as the release computes it, and no other
    collection is there."""
    found = read_catalog(model.run.consensus)
    assert found is not None
    catalog = found[0]
    assert catalog.version == str(release.version), (catalog.version, release.version)
    stored = {gid: ref.fingerprint for gid, ref in catalog.collections.items()}
    expected = {b.global_id: fingerprint(b.schema) for b in release.builtins}
    assert stored == expected, f"{release.version}: catalog {stored} != release {expected}"


def promote_killing_the_leader(model: WalkModel, version: str, generation: int) -> str:
    """Promote ``generation`` over HTTP and SIGKILL its leader once it took over; a follower
    of the generation takes over, or a restart of the release does."""
    epoch = int((model.epoch() or {"epoch": 0})["epoch"])
    members = model.pending()[(version, generation)]
    model.do("promote", processes=(members[0],), generation=generation)
    taken = model.await_epoch(epoch, generation, safety=0.5)
    victim = str(taken["leader"])
    model.do("kill", processes=(victim,), note="the new leader, as it takes over")
    model.live.pop(victim, None)
    # What each collection holds moves with the catalog: said before the catalog version the
    # model keeps moves (``promoted`` then sees no move), so rows appended next are counted.
    assert model.catalog_version is not None
    model.checker.row_rules.moved(model.catalog_version, version)
    model.expect_exits(version, generation, refused=False)
    if not model.leader_group():
        model.start(version, generation, 1)
    model.leader = model.wait_takeover(int(taken["epoch"]), generation)
    return victim


def start_armed(model: WalkModel, rng: random.Random, version: str, generation: int,
                count: int) -> dict[str, int]:  # fmt: skip
    """Start ``count`` processes of the version, each armed to SIGKILL itself right before
    its N-th fenced leader write, N drawn from 1..CRASH_WRITES (orchestrator.failpoints): the
    peer's random crash points, at exact and replayable steps of a takeover."""
    armed = {}
    for _ in range(count):
        point = rng.randint(1, CRASH_WRITES)
        (name,) = model.start(version, generation, 1, crash_before_write=point)
        armed[name] = point
    return armed


def promote_through_crash_points(
    model: WalkModel, version: str, generation: int, armed: dict[str, int]
) -> list[str]:
    """Promote ``generation``, whose processes are armed: each leader in turn crashes at its
    point, the next candidate takes over from what it left, and a process started unarmed once
    none is left finishes the takeover. A survivor still armed (its point past the writes a
    takeover makes) is SIGKILLed once it serves, and a fresh process takes over from it, so no
    armed process outlives the promotion. The processes that crashed, in order."""
    epoch = int((model.epoch() or {"epoch": 0})["epoch"])
    model.do("promote", generation=generation)
    taken = model.await_epoch(epoch, generation, safety=0.5)
    assert model.catalog_version is not None
    model.checker.row_rules.moved(model.catalog_version, version)
    model.expect_exits(version, generation, refused=False)
    crashed: list[str] = []
    deadline = time.monotonic() + 4 * TIMEOUT
    while True:
        assert time.monotonic() < deadline, f"no leader of g{generation} serves; {crashed}"
        for name in [n for n in armed if n not in crashed]:
            process = model.run.sidecars.get(name)
            if not process.running:
                assert process.returncode == -signal.SIGKILL, (name, process.returncode)
                process.exit_expected = True
                model.live.pop(name, None)
                crashed.append(name)
        if not model.leader_group():
            model.start(version, generation, 1)
        taken = model.epoch() or {}
        leader = str(taken.get("leader"))
        node = model.run.process_node(leader) if leader in model.live else None
        if taken.get("deploy_generation") == generation and node and node.state == "serving":
            if leader not in armed:
                model.leader = leader
                return crashed
            model.do("kill", processes=(leader,), note=f"armed at write {armed[leader]}, served")
            model.live.pop(leader, None)
            crashed.append(leader)
            for name in [n for n in armed if n in model.live]:  # the rest go too, unarmed next
                model.do("kill", processes=(name,), note=f"armed at write {armed[name]}")
                model.live.pop(name, None)
                crashed.append(name)
        time.sleep(0.2)


@pytest.mark.parametrize("seed", PORT_SEEDS)
def test_builtin_schema_migration(
    seed: int, zk_server: ZooKeeperEndpoint, tmp_path: Path
) -> None:
    ported = ported_history(seed)
    print(f"seed {seed} (replay: TEST_PORT_SEEDS={seed})\n{ported.history.describe()}")
    print(f"processes per version: {ported.processes}")
    write_release_files(tmp_path / "releases", seed)
    index = ReleaseIndex(tmp_path / "releases")
    history = index.releases()
    config = SimulationConfig(
        releases_dir=tmp_path / "releases", seed=seed, steps=0, timeout=TIMEOUT, max_processes=9
    )
    run: ScenarioRun = acting_run(
        zookeeper=ZooKeeperTarget(hosts=zk_server.hosts),
        work_dir=tmp_path / "run",
        env=f"port-{seed}-{uuid.uuid4().hex[:8]}",
        release_files=index.versions(),
        default_timeout=TIMEOUT,
        default_session_timeout=config.session_timeout,
        rng=random.Random(seed),
        history=history,
        invariants=True,
    )
    rng = random.Random(f"port:{seed}")
    run.open()
    try:
        assert run.checker is not None
        model = WalkModel(run, config, history, appendable_collections(history), run.checker)
        moves = UpgradeMoves(model)
        versions = [v for v, count in ported.processes.items() if count]
        generations = {v: g for g, v in enumerate(ported.processes, start=1)}
        early: dict[str, list[str]] = {}

        first = versions[0]
        (leader,) = model.start(first, 1, 1, auto=True)  # asked to bootstrap
        model.wait(leader, "serving")
        model.leader, model.catalog_version, model.catalog_generation = leader, first, 1
        for name in model.start(first, 1, ported.processes[first] - 1):
            model.wait(name, "ready")
        moves.append(rng)
        check(model, f"bootstrap {first}", writes=True)
        check_fingerprints(model, history[0])

        for k, version in enumerate(versions[1:], start=1):
            generation, count = generations[version], ported.processes[version]
            armed: dict[str, int] = {}
            names = early.pop(version, None)
            if names is None and rng.random() < CRASH_POINT_PROBABILITY:
                armed = start_armed(model, rng, version, generation, count)
                names = list(armed)
            names = names or model.start(version, generation, count)
            for name in names:
                model.wait(name, "ready")
            if not armed and rng.random() < KILL_PROBABILITY:  # a crash after its check
                victim = rng.choice(names)
                model.do("kill", processes=(victim,), note="a ready process, restarted")
                model.live.pop(victim)
                (again,) = model.start(version, generation, 1)
                model.wait(again, "ready")
            following = versions[k + 1] if k + 1 < len(versions) else None
            if following is not None and rng.random() < EARLY_PROBABILITY:
                started = model.start(
                    following, generations[following], ported.processes[following]
                )
                for name in started:
                    model.wait(name, "ready")
                early[following] = started
            check(model, f"{version} ready", writes=False)

            if armed:
                crashed = promote_through_crash_points(model, version, generation, armed)
                print(f"{version}: crash points {armed}, crashed {crashed}")
            elif rng.random() < KILL_LEADER_PROBABILITY:
                promote_killing_the_leader(model, version, generation)
            else:
                epoch = int((model.epoch() or {"epoch": 0})["epoch"])
                model.do("promote", generation=generation, wait=TIMEOUT)
                model.leader = model.wait_takeover(epoch, generation)
            model.promoted(version, generation)
            check_fingerprints(model, next(r for r in history if str(r.version) == version))
            for _ in range(rng.randint(1, 2)):
                moves.append(rng)
            moves.read(rng)
            check(model, f"{version} promoted", writes=True)
        found = model.checker.check_cleanup(timeout=TIMEOUT)
        assert not found, describe(found)
    finally:
        run.close(delete_environment=True)
