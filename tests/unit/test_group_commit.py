"""Group commit's turn-taking: appends queued while a commit runs go into the next one, each
settled with its own answer; a failed commit settles its whole group with the error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pyarrow as pa
import pytest

from orchestrator.dataplane.groupcommit import GroupCommit, Pending
from orchestrator.dataplane.idempotency import WriteIdentity


def pending(n: int, rows: int = 1) -> Pending:
    return Pending(WriteIdentity(f"w{n}"), pa.table({"x": list(range(rows))}))


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for ``condition`` (what the test synchronizes on, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


def test_appends_arriving_during_a_commit_share_the_next() -> None:
    groups: list[list[str]] = []
    first_running = threading.Event()
    release = threading.Event()

    def commit(members: Sequence[Pending]) -> None:
        groups.append([m.identity.write_id for m in members])
        if len(groups) == 1:
            first_running.set()
            release.wait(5)
        for m in members:
            m.settle({"id": m.identity.write_id, "group": len(groups)}, None)

    committer = GroupCommit(commit)
    answers: dict[int, object] = {}

    def submit(n: int) -> None:
        answers[n] = committer.submit(pending(n))

    threads = [threading.Thread(target=submit, args=(0,))]
    threads[0].start()
    assert first_running.wait(5)
    threads += [threading.Thread(target=submit, args=(n,)) for n in range(1, 6)]
    for thread in threads[1:]:
        thread.start()
    until(lambda: committer.queued == 5)  # all five queue behind the running commit
    release.set()
    for thread in threads:
        thread.join(5)
    assert groups[0] == ["w0"] and sorted(groups[1]) == [f"w{n}" for n in range(1, 6)]
    assert answers == {n: {"id": f"w{n}", "group": 1 if n == 0 else 2} for n in range(6)}


def test_a_failed_commit_settles_every_member_with_its_error() -> None:
    def commit(_members: Sequence[Pending]) -> None:
        raise RuntimeError("zookeeper said no")

    committer = GroupCommit(commit)
    with pytest.raises(RuntimeError, match="said no"):
        committer.submit(pending(1))


def test_groups_respect_the_member_and_row_limits() -> None:
    sizes: list[int] = []
    taken: list[int] = []
    gate = threading.Event()

    def commit(members: Sequence[Pending]) -> None:
        taken.append(len(members))
        gate.wait(5)
        sizes.append(len(members))
        for m in members:
            m.settle({}, None)

    committer = GroupCommit(commit, max_members=3, max_rows=10)
    threads = [
        threading.Thread(target=committer.submit, args=(pending(n, rows=4),)) for n in range(7)
    ]
    for thread in threads:
        thread.start()
    # Every append is in the first commit or queued behind it before any commit goes on.
    until(lambda: bool(taken) and taken[0] + committer.queued == 7)
    gate.set()
    for thread in threads:
        thread.join(5)
    assert sum(sizes) == 7 and max(sizes) <= 2  # 3 members would be 12 rows, past 10
    assert 2 in sizes[1:], sizes  # the queued ones were grouped, two at a time


def test_rows_that_fail_the_write_fail_only_their_own_append() -> None:
    """A group whose write Arrow refuses (one member's rows) is split: every other member is
    committed alone and answered, and only the failing one is refused, as a 400."""
    from catalog.errors import BadInputError

    commits: list[list[str]] = []
    started = threading.Event()
    release = threading.Event()

    def commit(members: Sequence[Pending]) -> None:
        ids = [m.identity.write_id for m in members]
        commits.append(ids)
        if len(commits) == 1:
            started.set()
            release.wait(5)
        if "w2" in ids:
            raise pa.ArrowInvalid("Column 'x' is declared non-nullable but contains nulls")
        for m in members:
            m.settle({"id": m.identity.write_id}, None)

    committer = GroupCommit(commit)
    answers: dict[int, object] = {}

    def submit(n: int) -> None:
        try:
            answers[n] = committer.submit(pending(n))
        except BadInputError as exc:
            answers[n] = exc

    threads = [threading.Thread(target=submit, args=(0,))]
    threads[0].start()
    assert started.wait(5)
    threads += [threading.Thread(target=submit, args=(n,)) for n in range(1, 5)]
    for thread in threads[1:]:
        thread.start()
    until(lambda: committer.queued == 4)
    release.set()
    for thread in threads:
        thread.join(5)
    assert sorted(commits[1]) == ["w1", "w2", "w3", "w4"]  # the group, refused whole
    assert sorted(map(tuple, commits[2:])) == [("w1",), ("w2",), ("w3",), ("w4",)]
    good = {n: a for n, a in answers.items() if n != 2}
    assert good == {n: {"id": f"w{n}"} for n in (0, 1, 3, 4)}
    refused = answers[2]
    assert isinstance(refused, BadInputError) and refused.details["rule"] == "unstorable"
