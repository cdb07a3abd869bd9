"""The Pacer (pure logic, on a fake clock): progress by batch, a rate held, a pause held and
ended by its check, the time paused left out of rate and ETA."""

from __future__ import annotations

import pytest

from catalog.pipeline.pacing import RATE_WINDOW, Pace, Pacer, StepProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def pacer(
    pace: list[Pace],
    reports: list[StepProgress | None],
    clock: Clock,
    every: float = 1.0,
    window: float = RATE_WINDOW,
) -> Pacer:
    return Pacer(
        lambda: pace[0], reports.append, clock=clock, wall=clock, sleep=clock.sleep, every=every,
        window=window,
    )  # fmt: skip


def test_progress_counts_batches_reports_a_rate_and_an_eta_and_ends_at_the_total() -> None:
    clock, pace = Clock(), [Pace()]
    reports: list[StepProgress | None] = []
    steps = pacer(pace, reports, clock, every=0.0)
    steps.begin("rewrite", "s.t")
    steps.expect(1000)
    for _ in range(4):
        clock.now += 1.0  # 100 rows a second
        steps.advance(100, 800)
    now = steps.progress
    assert now is not None and (now.rows_done, now.rows_total, now.rate) == (400, 1000, 100.0)
    assert now.eta_seconds == 6.0 and now.bytes_total == 8000 and now.fraction == 0.4
    done = [r.rows_done for r in reports if r is not None]
    assert done == sorted(done), "progress never goes back"
    steps.end()
    assert reports[-1] is None and reports[-2] is not None and reports[-2].rows_done == 400


def test_a_limit_holds_the_rate_and_a_new_limit_counts_from_when_it_is_set() -> None:
    clock, pace = Clock(), [Pace(rows_per_second=50.0)]
    reports: list[StepProgress | None] = []
    steps = pacer(pace, reports, clock)
    steps.begin("rewrite", "s.t")
    started = clock.now
    for _ in range(11):
        steps.advance(100)  # instantly read: only the limit takes time
    assert clock.now - started == pytest.approx(22.0)  # 1,100 rows at 50/s from the start
    pace[0] = Pace(rows_per_second=None)
    lifted = clock.now
    for _ in range(5):
        steps.advance(100)
    assert clock.now == lifted, "no limit, no wait"


def test_a_throttled_step_s_rate_is_the_limit_and_its_eta_the_truth() -> None:
    """Each batch takes some work, then waits for the limit: the rate counts whole turns (it
    was sampled before the wait, and read 6% short here, its ETA as long)."""
    clock, pace = Clock(), [Pace(rows_per_second=200.0)]
    reports: list[StepProgress | None] = []
    steps = pacer(pace, reports, clock, every=0.0, window=3.0)
    steps.begin("rewrite", "s.t")
    steps.expect(50 * 50)
    seen = []
    for _ in range(50):
        clock.now += 0.06  # the batch's work; the limit gives it 0.25 s a turn
        steps.advance(50)
        now = steps.progress
        assert now is not None and now.eta_seconds is not None
        seen.append((clock.now, now.rate, now.eta_seconds))
    ended = clock.now
    later = [(rate, eta, ended - at) for at, rate, eta in seen[20:]]  # past the first window
    assert all(rate == pytest.approx(200.0) for rate, _, _ in later), later
    assert all(eta == pytest.approx(truth, abs=1e-6) for _, eta, truth in later), later


def test_one_batch_is_held_to_the_limit_and_a_pause_interrupts_the_wait() -> None:
    clock, pace = Clock(), [Pace(rows_per_second=1.0)]
    reports: list[StepProgress | None] = []
    seen: list[float] = []

    def pause_after_three_seconds() -> None:
        seen.append(clock.now)
        if clock.now - seen[0] >= 3.0 and not pace[0].paused:
            pace[0] = Pace(paused=True, rows_per_second=1.0)
        elif clock.now - seen[0] >= 13.0:
            pace[0] = Pace(rows_per_second=None)

    steps = Pacer(
        lambda: pace[0], reports.append, pause_after_three_seconds, clock=clock, wall=clock,
        sleep=clock.sleep,
    )  # fmt: skip
    steps.begin("rewrite", "s.t")
    steps.advance(100)  # one batch of 100 rows at 1 row/s: due in 100 s, paused after 3
    assert any(r is not None and r.paused for r in reports), "the pause shows at once"
    assert clock.now - seen[0] == pytest.approx(13.0, abs=0.5), "held, then released"


def test_a_pause_holds_until_resumed_leaves_its_time_out_of_the_rate_and_may_be_ended() -> None:
    clock, pace = Clock(), [Pace()]
    reports: list[StepProgress | None] = []
    waited: list[float] = []

    def resume_after_ten_seconds() -> None:
        waited.append(clock.now)
        if clock.now - waited[0] >= 10.0:
            pace[0] = Pace()

    steps = Pacer(
        lambda: pace[0], reports.append, resume_after_ten_seconds, clock=clock, wall=clock,
        sleep=clock.sleep,
    )  # fmt: skip
    steps.begin("rewrite", "s.t")
    steps.expect(300)
    clock.now += 1.0
    steps.advance(100)
    pace[0] = Pace(paused=True)
    clock.now += 1.0
    steps.advance(100)  # held here
    assert any(r is not None and r.paused for r in reports)
    assert waited and clock.now - waited[0] >= 10.0
    now = steps.progress
    assert now is not None and not now.paused and now.rate == 100.0, "paused time left out"

    class Fenced(Exception):
        pass

    def fenced() -> None:
        raise Fenced()

    held = Pacer(lambda: Pace(paused=True), reports.append, fenced, clock=clock, sleep=clock.sleep)
    held.begin("delta copy", "s.t")
    with pytest.raises(Fenced):
        held.expect(500, done=200)  # a paused step still ends when fenced
    waiting = reports[-1]
    assert waiting is not None and waiting.paused, "held once it knows its rows"
    assert (waiting.rows_done, waiting.rows_total) == (200, 500), "a checkpoint shows as it waits"


def test_progress_survives_its_json() -> None:
    clock = Clock()
    reports: list[StepProgress | None] = []
    steps = pacer([Pace(rows_per_second=10.0)], reports, clock)
    steps.begin("rewrite", "s.t")
    steps.expect(10)
    now = steps.progress
    assert now is not None and StepProgress.from_json(now.to_json()) == now
    assert StepProgress.from_json({"step": "x"}) is None and StepProgress.from_json(3) is None


def test_an_engine_s_observed_progress_only_moves_forward_and_is_never_held() -> None:
    clock, pace = Clock(), [Pace(rows_per_second=1.0, paused=False)]
    reports: list[StepProgress | None] = []
    steps = pacer(pace, reports, clock, every=0.0)
    steps.begin("rewrite", "s.t")
    steps.expect(1000)
    started = clock.now
    steps.observe(400, tasks=(2, 5))
    steps.observe(300, tasks=(2, 5))  # an older reading: rows never go back
    assert clock.now == started, "observed progress is never throttled"
    now = steps.progress
    assert now is not None and (now.rows_done, now.tasks_done, now.tasks_total) == (400, 2, 5)
    assert steps.rows_done == 400
    steps.advance(1000 - steps.rows_done)  # the job ended: the rest counted (and throttled)
    steps.end()
    last = [r for r in reports if r is not None][-1]
    assert last.rows_done == 1000 and last.fraction == 1.0
    steps.observe(5000)  # between steps: nothing to count
    assert steps.progress is None


def test_a_job_s_tasks_give_an_eta_counted_down_between_them() -> None:
    """Progress that moves by tasks (a wave every 2 s after 5 s of planning and a first wave
    that also warmed up): no ETA until the job's pace is known, then one from that pace that
    counts down between waves, where a windowed rate would sag and the ETA grow."""
    clock, pace = Clock(), [Pace()]
    steps = pacer(pace, [], clock, every=0.0)
    steps.begin("rewrite", "s.t")
    steps.expect(1000)
    clock.now += 5.0  # planning: listing files, a job of its own
    steps.observe(0, tasks=(0, 10))  # the copy's job is seen
    clock.now += 6.0  # the first wave starts the workers too
    steps.observe(200, tasks=(2, 10))
    first = steps.progress
    assert first is not None and first.eta_seconds is None and first.rate == 0.0
    ends = clock.now + 8.0
    etas = []
    for wave in range(2, 5):
        for _ in range(4):
            clock.now += 0.5
            now = steps.progress
            if now is not None and now.eta_seconds is not None:
                etas.append((now.eta_seconds, ends - clock.now))
        steps.observe(200 * wave, tasks=(2 * wave, 10))
    assert len(etas) == 8, "an ETA from the second wave on"
    assert all(abs(eta - truth) < 1e-6 for eta, truth in etas), etas
    assert steps.progress is not None and steps.progress.rate == 100.0
    clock.now += 30.0  # a wave far slower than the others: the ETA stops at zero, no lower
    assert steps.progress is not None and steps.progress.eta_seconds == 0.0


def test_rows_of_running_tasks_give_the_recent_rate_s_eta() -> None:
    """Progress that counts the rows of running tasks moves smoothly: its ETA comes from the
    rate over the window, as for batches (a job that sped up is judged by its pace now), and
    not from its first jump."""
    clock, pace = Clock(), [Pace()]
    steps = Pacer(
        lambda: pace[0], lambda _: None, clock=clock, wall=clock, sleep=clock.sleep, every=0.0,
        window=2.0,
    )  # fmt: skip
    steps.begin("rewrite", "s.t")
    steps.expect(10_000)
    clock.now += 5.0  # planning, and the first tasks starting
    steps.observe(0, tasks=(0, 10), running=True)
    for _ in range(8):  # 4 s at 250 rows/s, then it speeds up to 1,000 rows/s
        clock.now += 0.5
        steps.observe(steps.rows_done + 125, tasks=(0, 10), running=True)
    for _ in range(8):
        clock.now += 0.5
        steps.observe(steps.rows_done + 500, tasks=(4, 10), running=True)
    now = steps.progress
    assert now is not None and now.rows_done == 5000
    assert now.rate == 1000.0 and now.eta_seconds == 5.0
    # Stepped progress that follows switches to the job's pace again, from its next jump.
    steps.observe(6000, tasks=(6, 10))
    assert steps.progress is not None and steps.progress.eta_seconds is None
