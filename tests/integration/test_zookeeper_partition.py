"""The sidecar leader when the ZooKeeper server holding its session is cut from the quorum.

The contract (docs/design-contract.md): a cut server stops serving only once it notices it
lost its peers (``syncLimit`` x ``tickTime``); a session on it that is shorter than that expires
on the majority first. The leader then steps down, takes its leadership back with a new session
at a new epoch, and serves again; its clients meanwhile get 503 with ``Retry-After``, never 409
``read-only``. This is the randomized walk's failure made deterministic: the leader's session is
put on a follower before that follower is cut.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog.consensus import Consensus, env_root
from orchestrator.election import read_epoch
from orchestrator.scenario import ZooKeeperTarget
from orchestrator.testing.ensemble import ZooKeeperEnsemble
from orchestrator.testing.harness import SidecarProcess
from orchestrator.testing.netns import unavailable
from support.sidecars import ndjson, release_file
from support.zookeeper import kazoo_client

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.quiet]

SESSION_TIMEOUT = 2.0
COLLECTION = "mz_catalog.mz_tables"


@pytest.fixture
def target(tmp_path: Path) -> Iterator[ZooKeeperTarget]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"cutting a ZooKeeper server from its peers needs network namespaces: {reason}")
    with ZooKeeperTarget.open(None, tmp_path / "zk", servers=3, isolated=True) as opened:
        yield opened


def _row(number: int) -> dict[str, object]:
    return {"id": f"c{number}", "oid": 50000 + number, "schema_id": "u3", "name": f"cut-{number}",
            "owner_id": "u1"}  # fmt: skip


def _session_on(
    role: str, ensemble: ZooKeeperEnsemble, consensus: Consensus, process: SidecarProcess
) -> tuple[int, int]:
    """Move the leader's session until a server of ``role`` holds it (a restarted server
    holding it drops it; kazoo moves it to another): that server's number and the epoch.

    A move lands on a random server, so each is a coin toss; a session between servers (no
    member lists it yet) or a server still joining (no mode yet) is looked at again, not
    counted as a move."""
    deadline = time.monotonic() + 240
    moved = 0
    while moved < 12 and time.monotonic() < deadline:
        epoch = read_epoch(consensus)
        assert epoch is not None and epoch.session is not None
        holder = ensemble.holding(epoch.session)
        mode = ensemble.mode(holder) if holder is not None else None
        if holder is not None and mode == role:
            return holder, epoch.epoch
        if holder is None or mode is None:
            time.sleep(0.5)
            continue
        ensemble.kill_member(holder)
        ensemble.start_member(holder, timeout=60)
        moved += 1
        process.wait_ready(timeout=60)
    raise AssertionError(f"the leader's session never settled on a {role} in {moved} moves")


@pytest.mark.parametrize(
    ("role", "frozen"), [("follower", True), ("follower", False), ("leader", False)]
)
def test_a_leader_whose_session_server_is_cut_serves_again_and_never_answers_read_only(
    role: str, frozen: bool, target: ZooKeeperTarget, tmp_path: Path
) -> None:
    """The leader's session is on the server that is cut. ``frozen``: the sidecar is stopped
    (SIGSTOP) for longer than its session timeout as the cut happens, so it cannot move its
    session in time (the slow reconnect the randomized walk met): the session expires, the
    leader steps down and takes its leadership back at a new epoch. Otherwise it usually
    moves its session to the majority and keeps its epoch. Either way every append is
    answered 200 or 503 with Retry-After, and the leader serves again in time."""
    ensemble = target.ensemble
    assert ensemble is not None
    env = f"t-{uuid.uuid4().hex[:12]}"
    client = kazoo_client(target.hosts)
    client.start(timeout=15)
    process = SidecarProcess.start(
        zk=target.hosts, env=env, name="blue", version="0.10.0",
        release_file=release_file("0.10.0"), deploy_generation=1,
        log_path=tmp_path / "blue.log", blob=tmp_path / "blob",
        session_timeout=SESSION_TIMEOUT, auto_promote=True,
    )  # fmt: skip
    try:
        process.wait_state(client, "serving", timeout=60)
        consensus = Consensus(client, env_root(env))
        holder, old_epoch = _session_on(role, ensemble, consensus, process)

        if frozen:
            process.pause()
        ensemble.isolate(holder)
        if frozen:
            time.sleep(SESSION_TIMEOUT + 1.0)  # past the expiry on the majority
            process.resume()
        cut_at = time.monotonic()
        statuses: list[int] = []
        number = 0
        while True:
            number += 1
            key = {"Idempotency-Key": f"cut-{number}"}
            answer = process.request("POST", f"/append?collection={COLLECTION}",
                                     ndjson([_row(number)]), headers=key, timeout=15)  # fmt: skip
            statuses.append(answer.status)
            if answer.status == 200:
                break
            # Never 409 read-only from the process that led a moment ago: a pause to wait out.
            assert answer.status == 503, (answer.status, answer.body)
            assert answer.headers.get("Retry-After") == "1", answer.headers
            assert json.loads(answer.body)["error"] == "writes-paused"
            assert time.monotonic() - cut_at < 30, statuses
            time.sleep(0.2)
        served_after = time.monotonic() - cut_at

        epoch = read_epoch(consensus)
        assert epoch is not None and epoch.leader == process.process_id
        if frozen:  # the session expired: it stepped down and took its leadership back
            assert epoch.epoch > old_epoch, (statuses, served_after)
            assert 503 in statuses
        # The cut server notices after syncLimit x tickTime (2.5 s here): within that and the
        # session timeout plus 1 s, the leader serves again.
        detection = 5 * ensemble.members[0].tick_time_ms / 1000
        assert served_after <= detection + SESSION_TIMEOUT + 1.0, (served_after, statuses)
        print(f"epoch {old_epoch} -> {epoch.epoch}: serving {served_after:.2f} s after the cut"
              f"{' and resume' if frozen else ''}; answers {statuses}")  # fmt: skip
    finally:
        process.terminate()
        process.wait_exit(timeout=30)
        client.stop()
        client.close()


#: How long the member stays cut while the quorum keeps writing: long enough that, without
#: the ensemble's peer settings (orchestrator.testing.ensemble), its connections to its peers
#: sit in retransmission backoff and its election retries back off to many seconds.
CUT_SECONDS = 30.0
#: Seconds from the heal to the member serving the quorum's writes (without the settings: tens).
REJOIN_SECONDS = 10.0


def test_a_member_cut_for_long_serves_again_within_seconds_of_the_heal(
    target: ZooKeeperTarget,
) -> None:
    """A follower cut from its peers while the quorum writes on serves again, with every
    write, within seconds of the heal: its stale peer connections die in about 3 s and its
    election notifications repeat at most every 2 s, so nothing waits out the kernel's
    retransmission backoff or ZooKeeper's 60 s notification interval."""
    ensemble = target.ensemble
    assert ensemble is not None
    cut = next(n for n in (1, 2, 3) if ensemble.mode(n) == "follower")
    majority = ",".join(m.hosts for n, m in enumerate(ensemble.members, start=1) if n != cut)
    root = f"/rejoin-{uuid.uuid4().hex[:12]}"
    writer = kazoo_client(majority)
    writer.start(timeout=15)
    try:
        ensemble.isolate(cut)
        written = 0
        ends = time.monotonic() + CUT_SECONDS
        while time.monotonic() < ends:  # proposals the cut member misses, and must sync
            writer.create(f"{root}/w{written:06d}", b"x" * 128, makepath=True)
            written += 1
            time.sleep(0.05)
        assert ensemble.mode(cut) is None  # it noticed the cut and stopped serving

        ensemble.rejoin(cut)
        healed = time.monotonic()
        while (mode := ensemble.mode(cut)) != "follower":
            waited = time.monotonic() - healed
            assert waited < REJOIN_SECONDS, f"server {cut} not back {waited:.1f} s after the heal"
            time.sleep(0.1)
        rejoined = time.monotonic() - healed
        reader = kazoo_client(ensemble.members[cut - 1].hosts)
        reader.start(timeout=15)
        try:
            reader.sync(root)
            assert len(reader.get_children(root)) == written
        finally:
            reader.stop()
            reader.close()
        print(f"server {cut} cut {CUT_SECONDS:g} s ({written} writes missed): {mode} again "
              f"{rejoined:.2f} s after the heal")  # fmt: skip
    finally:
        writer.stop()
        writer.close()

