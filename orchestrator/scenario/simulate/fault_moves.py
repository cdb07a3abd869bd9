"""The walk's faults: kills at every phase, zombie leaders, session expiries, and the recovery
that follows each."""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import attrs

from catalog.release import Version
from orchestrator.process_node import ProcessState
from orchestrator.scenario import StepFailed
from orchestrator.scenario.simulate.moves import UpgradeMoves
from orchestrator.scenario.simulate.traced_rows import discarded_by_rollback, make_rows
from orchestrator.scenario.simulate.values import Member, WalkFailed
from orchestrator.scenario.simulate.walk_core import WalkModel

# The lost-answer fault picks its write among the first this many of the new leader (about what
# a migration of the example history makes, so late picks land on appends and finalizations).
LOST_ANSWER_WRITES = 16


@attrs.define
class FaultMoves:
    """One method per fault kind (named after it); each recovers the environment before
    returning."""

    model: WalkModel
    upgrades: UpgradeMoves

    def _recover(self, old_epoch: int, *, ready: bool = True) -> str:
        """The leader is gone: a follower of its generation takes over, or a restart does;
        with ``ready``, every other process is then waited for until ready again."""
        assert self.model.catalog_version is not None
        if not self.model.leader_group():
            (name,) = self.model.start(self.model.catalog_version, self.model.catalog_generation, 1)
            how = f"restarted as {name}"
        else:
            how = "a follower took over"
        self.model.leader = self.model.wait_takeover(old_epoch, self.model.catalog_generation)
        for name in sorted(self.model.live) if ready else ():
            if name != self.model.leader:
                self.model.wait(name, "ready")
        return f"{how}: {self.model.leader}"

    def _write_refused(self, old: str, label: str, rng: random.Random) -> None:
        """An append to ``old``, a leader cut off by a fault after a successor took over, must
        be refused: an acknowledged one is a stale write (WalkFailed)."""
        assert self.model.catalog_version is not None
        release = self.model.release(self.model.catalog_version)
        name = rng.choice(
            sorted(n for n in self.model.appendable if release.builtin(n) is not None)
        )
        builtin = release.builtin(name)
        assert builtin is not None
        rows = tuple(make_rows(builtin, self.model.appendable[name], [label]))
        epoch = self.model.epoch() or {}
        try:
            self.model.do("append", processes=(old,), collection=name, rows=rows, refused=True)
        except StepFailed as exc:
            raise WalkFailed(
                str(exc), [self.model.checker.stale_write(old, epoch.get("leader"), str(exc))]
            ) from exc
        self.model.checker.no_stale_write_checked()

    def kill_checking(self, rng: random.Random) -> str:
        """SIGKILL a new read-only process while it checks (between its shard and entry
        writes, when the timing is right): what it leaves behind must not block anyone."""
        assert self.model.catalog_version is not None
        current = Version.parse(self.model.catalog_version)
        version = rng.choice([v for v in self.model.versions if Version.parse(v) >= current])
        generation = self.model.next_generation
        self.model.next_generation += 1
        (name,) = self.model.start(version, generation, 1)
        process = self.model.run.sidecars.get(name)
        started = time.monotonic()
        delay = rng.uniform(0.0, 0.25)
        seen = None
        while time.monotonic() - started < self.model.config.timeout and process.running:
            node = self.model.run.process_node(name)
            seen = node.process_state if node else None
            if seen in (ProcessState.CHECKING, ProcessState.READY):
                break
            time.sleep(0.005)  # racing the process on purpose: a watch round trip is too slow
        time.sleep(delay)
        node = self.model.run.process_node(name)
        state, phase = (node.state, node.phase) if node else (None, None)
        self.model.do(
            "kill",
            processes=(name,),
            note=f"killed {time.monotonic() - started:.3f} s after start, in state "
            f"{state} ({phase})",
        )
        self.model.live.pop(name)
        return f"SIGKILL {name} ({version} g{generation}) in state {state}"

    def kill_follower(self, rng: random.Random) -> str:
        name = rng.choice(self.model.followers())
        self.model.do("kill", processes=(name,))
        self.model.live.pop(name)
        return f"SIGKILL follower {name}"

    def kill_leader(self, rng: random.Random) -> str:
        assert self.model.leader is not None
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        killed = self.model.leader
        self.model.do("kill", processes=(killed,))
        self.model.live.pop(killed)
        return f"SIGKILL leader {killed}; " + self._recover(old_epoch)

    def kill_mid_migration(self, rng: random.Random) -> str:
        """Promote over HTTP and SIGKILL the new leader as soon as it took over."""
        (version, generation), members = rng.choice(list(self.model.pending().items()))
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        self.model.do("promote", processes=(rng.choice(members),), generation=generation)
        epoch = self.model.await_epoch(old_epoch, generation, safety=0.5)
        victim = str(epoch["leader"])
        if rng.random() < 0.5:
            # The other crash point: once the new leader reports it is migrating.
            with contextlib.suppress(StepFailed):
                self.model.run.wait_state(self.model.run.sidecars.get(victim), "migrating", 5.0)
        node = self.model.run.process_node(victim)
        state, phase = (node.state, node.phase) if node else (None, None)
        self.model.do("kill", processes=(victim,), note=f"killed in state {state}")
        self.model.live.pop(victim, None)
        # The promotion fences lower generations at once; refusals wait for the catalog switch,
        # which only the successor (a follower, or a restart) completes.
        self.model.expect_exits(version, generation, refused=False)
        recovered = self._recover(int(epoch["epoch"]), ready=False)
        self.model.promoted(version, generation)
        return (
            f"promote {version} g{generation}, SIGKILL its leader {victim} "
            f"(state {state}, phase {phase}); {recovered}"
        )

    def lost_answer(self, rng: random.Random) -> str:
        """Upgrade with one process whose Nth fenced write lands but whose answer is lost (the
        ConnectionLoss of a dropped reply), and promote it: it must recognise its own write,
        during its migration or, for a late N, at a finalization or an append it serves."""
        assert self.model.catalog_version is not None
        current = Version.parse(self.model.catalog_version)
        version = rng.choice([v for v in self.model.versions if Version.parse(v) >= current])
        generation = self.model.next_generation
        self.model.next_generation += 1
        write = rng.randint(1, LOST_ANSWER_WRITES)
        (name,) = self.model.start(version, generation, 1, lose_answer_after_write=write)
        self.model.wait(name, "ready")
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        self.model.do("promote", processes=(name,), generation=generation)
        self.model.leader = self.model.wait_takeover(old_epoch, generation)
        self.model.promoted(version, generation)
        return f"promote {version} g{generation}: {name} loses the answer of fenced write {write}"

    def _promote_one(self, version: str, generation: int, **window: Any) -> str:
        """Start one process of ``version`` at ``generation`` (``window``: its start step's
        finalize_after, rollback_from, discard_writes_to), promote it and wait until it leads."""
        (name,) = self.model.start(version, generation, 1, **window)
        self.model.wait(name, "ready")
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        self.model.do("promote", generation=generation, wait=self.model.config.timeout)
        self.model.leader = self.model.wait_takeover(old_epoch, generation)
        self.model.promoted(version, generation)
        return name

    def rollback(self, rng: random.Random) -> str:
        """Upgrade to a newer release with a reversible window, append under it, then at a
        random point roll back to the release it came from (the rewrite's inverse carries rows
        back; collections with none are discarded, as an operator must say); half the time
        upgrade again and finalize, after which the older release is refused."""
        assert self.model.catalog_version is not None
        previous = self.model.catalog_version
        newer = [v for v in self.model.versions if Version.parse(v) > Version.parse(previous)]
        version = rng.choice(newer)
        generation = self.model.next_generation
        self.model.next_generation += 2
        self._promote_one(version, generation, finalize_after="never")
        appended = 0
        for _ in range(rng.randint(0, 3)):  # the random point: after 0 to 3 appends
            self.upgrades.append(rng, previous)
            appended += 1
        discard = discarded_by_rollback(self.model.history, previous, version)
        back = self._promote_one(
            previous, generation + 1, rollback_from=version, discard_writes_to=discard
        )
        done = (
            f"upgrade {previous} -> {version} g{generation} (pending), {appended} append(s), "
            f"rolled back by {back} g{generation + 1}"
            + (f" discarding {', '.join(discard)}" if discard else "")
        )
        if rng.random() < 0.5 or len(self.model.live) >= self.model.config.max_processes:
            return done
        again = self.model.next_generation
        self.model.next_generation += 2
        self._promote_one(version, again, finalize_after="never")
        self.upgrades.append(rng, previous)
        self.model.do("finalize", version=version, wait=self.model.config.timeout)
        (late,) = self.model.start(previous, again + 1, 1)
        self.model.expect_exit(late, 4)
        return done + f"; upgraded again g{again}, finalized, {previous} refused"

    def zombie(self, rng: random.Random) -> str:
        assert self.model.leader is not None and self.model.catalog_version is not None
        if len(self.model.leader_group()) < 2:
            (spare,) = self.model.start(
                self.model.catalog_version, self.model.catalog_generation, 1
            )
            self.model.wait(spare, "ready")
        zombie = self.model.leader
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        self.model.do("pause", processes=(zombie,))
        self.model.live.pop(zombie)
        self.model.leader = self.model.wait_takeover(old_epoch, self.model.catalog_generation)
        self.model.do("resume", processes=(zombie,))
        self._write_refused(zombie, "zombie", rng)
        self.model.live[zombie] = Member(
            zombie, self.model.catalog_version, self.model.catalog_generation
        )
        self.model.wait(zombie, "ready")  # it steps down and re-joins as a follower
        return (
            f"zombie {zombie}: paused until {self.model.leader} took over; its write was refused "
            "and it re-joined as a follower"
        )

    def partition_leader(self, rng: random.Random) -> str:
        """Cut the leader off from ZooKeeper while its clients still reach it: it must stop
        acknowledging writes (an append to it is refused), a follower of its generation takes
        over, and once healed it re-joins as a follower."""
        assert self.model.leader is not None and self.model.catalog_version is not None
        if len(self.model.leader_group()) < 2:
            (spare,) = self.model.start(
                self.model.catalog_version, self.model.catalog_generation, 1
            )
            self.model.wait(spare, "ready")
        cut = self.model.leader
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        self.model.do("partition", processes=(cut,), cut="zookeeper")
        self.model.live.pop(cut)
        self.model.leader = self.model.wait_takeover(old_epoch, self.model.catalog_generation)
        self._write_refused(cut, "partitioned", rng)
        self.model.do("heal", processes=(cut,))
        self.model.live[cut] = Member(
            cut, self.model.catalog_version, self.model.catalog_generation
        )
        self.model.wait(cut, "ready")
        return (
            f"partitioned leader {cut} from ZooKeeper: {self.model.leader} took over, its write "
            "was refused, and healed it re-joined as a follower"
        )

    def zookeeper_server(self, rng: random.Random) -> str:
        """Kill a ZooKeeper server of the ensemble (its leader or a follower) and write through
        the remaining quorum; or, one time in three, kill a second one for half a session
        timeout (no quorum: nothing may be written, nobody may be fenced). Then restart them:
        the same leader serves, every acknowledged row intact."""
        assert self.model.leader is not None
        first = rng.choice(["leader", "follower"])
        detail = self.model.do("kill_zookeeper", server=first)
        lose_quorum = rng.random() < 1 / 3
        if lose_quorum:
            self.model.do("kill_zookeeper", server="follower")
            self.model.do("sleep", seconds=self.model.config.session_timeout / 2)
        else:
            self.upgrades.append(rng)  # two of three servers: writes go on
        self.model.do("start_zookeeper", timeout=self.model.config.timeout)
        self.model.wait(self.model.leader, "serving")
        outage = "quorum lost, then back" if lose_quorum else "a write through the quorum"
        return f"{detail}; {outage}; {self.model.leader} serves again"

    def partition_zookeeper(self, rng: random.Random) -> str:
        """Cut a ZooKeeper server (the ensemble's leader or a follower) off from its peers
        while its clients still reach it: it must stop serving and the majority answer (the
        step checks both); a write goes through the majority; healed, it rejoins.

        The contract (docs/design-contract.md): the sidecar leader keeps its leadership
        when its session moves to the majority in time; when the cut server held its session
        and the session expired first, it steps down and a leader of its generation serves
        again (appends meanwhile answer 503 with Retry-After, never 409)."""
        assert self.model.leader is not None
        before = self.model.epoch() or {"epoch": 0}
        which = rng.choice(["leader", "follower"])
        detail = self.model.do(
            "partition_zookeeper", server=which, timeout=self.model.config.timeout
        )
        kept = self._leader_after_cut(int(before["epoch"]), before.get("session"))
        self.upgrades.append(rng)
        self.model.do("heal_zookeeper", timeout=self.model.config.timeout)
        self.model.wait(self.model.leader, "serving")
        how = "its session moved to the majority" if kept else "it lost its session; took over"
        return f"{detail}; {how}; a write through the majority; healed, {self.model.leader} serves"

    def _leader_after_cut(self, old_epoch: int, session: str | None) -> bool:
        """After a ZooKeeper server was cut off: whether the leader kept its session (a member
        of the majority holds it now), or else the leader that took over since (the model's
        leader either way, once serving)."""
        ensemble = self.model.run.zookeeper.ensemble
        assert ensemble is not None
        deadline = time.monotonic() + self.model.config.timeout
        held = 0
        while time.monotonic() < deadline:
            epoch = self.model.epoch() or {"epoch": 0}
            if int(epoch["epoch"]) != old_epoch:
                generation = self.model.catalog_generation
                self.model.leader = self.model.wait_takeover(old_epoch, generation)
                return False
            holder = None if session is None else ensemble.holding(session)
            held = held + 1 if holder not in (None, *ensemble.isolated_members()) else 0
            if held >= 3:  # seen on the majority three times in a row: the session lives
                self.model.wait(self.model.leader or "", "serving")
                return True
            time.sleep(0.2)
        raise StepFailed(
            f"after {self.model.config.timeout:g} s: leader {self.model.leader} neither kept "
            "its session nor was followed by a new leader after the cut"
        )

    def expire_follower(self, rng: random.Random) -> str:
        name = rng.choice(self.model.followers())
        self.model.do("expire", processes=(name,), timeout=self.model.config.timeout)
        self.model.wait(name, "ready")
        return f"session of follower {name} expired; ready again"

    def expire_leader(self, rng: random.Random) -> str:
        assert self.model.leader is not None
        old_epoch = int((self.model.epoch() or {"epoch": 0})["epoch"])
        expired = self.model.leader
        self.model.do("expire", processes=(expired,), timeout=self.model.config.timeout)
        # It steps down and re-joins: a follower of its generation takes over, or, alone, it
        # leads again at a new epoch.
        return f"session of leader {expired} expired; " + self._recover(old_epoch)
