"""Scenario steps that drive processes: start, wait, promote, append, read, stop, expectations."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from typing import TYPE_CHECKING, Any

import attrs

from catalog.consensus import CONNECTION_ERRORS
from catalog.consensus.watch import NOT_YET, NotYet, WaitTimeout, Watch, wait_until
from catalog.errors import CatalogError
from orchestrator.scenario.format import (
    is_missing,
    resolve_path,
)
from orchestrator.scenario.format.steps import (
    AppendStep,
    ExpectExitStep,
    ExpectStatusStep,
    FinalizeStep,
    PauseStepsStep,
    PromoteStep,
    ReadStep,
    ResumeStepsStep,
    SleepStep,
    StartStep,
    StopStep,
    SustainStep,
    ThrottleStep,
    WaitStep,
)
from orchestrator.scenario.multisets import compare, json_default, row_multiset
from orchestrator.scenario.results import (
    AppendRecord,
    StepFailed,
)
from orchestrator.scenario.sustain import DEFAULT_MAX_READ_SECONDS, SustainedWrites
from orchestrator.testing.forkserver import fork_server
from orchestrator.testing.harness import child_environment

if TYPE_CHECKING:
    from orchestrator.scenario.runner import ScenarioRun


@attrs.define
class ProcessActions:
    """The process-facing steps of a run: one ``do_<action>`` method per step kind."""

    run: ScenarioRun

    def do_start(self, step: StartStep) -> str:
        assert step.release is not None and step.generation is not None
        release_file = self.run.release_files[step.release]
        names = list(step.processes)
        self.run.rng.shuffle(names)  # concurrent starts in a seed-chosen order
        started = []
        for name in names:
            process = self.run.sidecars.start(
                name,
                release_file,
                step.release,
                step.generation,
                auto_promote=step.auto_promote,
                session_timeout=step.session_timeout or self.run.default_session_timeout,
                crash_before_write=step.crash_before_write,
                lose_answer_after_write=step.lose_answer_after_write,
                isolated=self.run.isolate_all or name in self.run.partitioned,
                finalize_after=step.finalize_after,
                extra=self._rollback_args(step),
            )
            started.append(f"{name} pid {process.pid}")
        return ", ".join(started)

    def _rollback_args(self, step: StartStep) -> tuple[str, ...]:
        args: list[str] = []
        if step.rollback_from is not None:
            args += ["--rollback-from", str(self.run.release_files[step.rollback_from])]
        for name in step.discard_writes_to:
            args += ["--discard-writes-to", name]
        if step.copy_rate is not None:
            args += ["--copy-rate", f"{step.copy_rate:g}"]
        return tuple(args)

    def do_wait(self, step: WaitStep) -> str:
        assert step.state is not None
        process = self.run.process_of(step)
        return self.run.wait_state(process, step.state, self.run.timeout_of(step))

    def do_promote(self, step: PromoteStep) -> str:
        assert step.generation is not None
        if step.process:
            process = self.run.process_of(step)
            answer = process.request(
                "POST",
                f"/promote?deploy_generation={step.generation}",
                b"",
                timeout=self.run.timeout_of(step),
            )
            expected = step.expect_http or (200,)
            if answer.status not in expected:
                raise StepFailed(
                    f"POST /promote to {process.name} answered {answer.summary()}, "
                    f"expected HTTP {'/'.join(map(str, expected))}"
                )
            return answer.summary()
        args = ["promote", "--deploy-generation", str(step.generation)]
        if step.before_deploy:
            args.append("--before-deploy")
        if step.wait is not None:
            args += ["--wait", f"{step.wait:g}"]
        return self._cli(args, step.wait, step.code, step)

    def do_finalize(self, step: FinalizeStep) -> str:
        query = f"?version={step.version}" if step.version else ""
        if step.process:
            process = self.run.process_of(step)
            answer = process.request(
                "POST", f"/finalize{query}", b"", timeout=self.run.timeout_of(step)
            )
            expected = step.expect_http or (200, 202)
            if answer.status not in expected:
                raise StepFailed(
                    f"POST /finalize to {process.name} answered {answer.summary()}, "
                    f"expected HTTP {'/'.join(map(str, expected))}"
                )
            return answer.summary()
        args = ["finalize", "--wait", f"{step.wait if step.wait is not None else 30.0:g}"]
        if step.version:
            args += ["--version", step.version]
        return self._cli(args, step.wait if step.wait is not None else 30.0, step.code, step)

    def do_throttle(self, step: ThrottleStep) -> str:
        rate = step.rows_per_second
        args = ["throttle", "--deploy-generation", str(step.generation)]
        args += ["--rows-per-second", rate if isinstance(rate, str) else f"{rate:g}"]
        return self._cli([*args, "--requested-by", "scenario"], None, step.code, step)

    def do_pause_steps(self, step: PauseStepsStep) -> str:
        args = ["pause", "--deploy-generation", str(step.generation), "--requested-by", "scenario"]
        return self._cli(args, None, step.code, step)

    def do_resume_steps(self, step: ResumeStepsStep) -> str:
        args = ["resume", "--deploy-generation", str(step.generation), "--requested-by", "scenario"]
        return self._cli(args, None, step.code, step)

    def _cli(self, args: list[str], wait: float | None, code: int | None, step: Any) -> str:
        """Run ``catalog-upgrade ARGS`` against the scenario's environment; its exit code must
        be ``code`` (default 0). The summary: the exit code and the line that says why."""
        command = [*args, "--zk", self.run.zookeeper.hosts, "--env", self.run.env]
        timeout = self.run.timeout_of(step, (wait or 0.0) + self.run.default_timeout)
        what = f"`catalog-upgrade {' '.join(args)}`"
        try:
            done = fork_server(child_environment()).run(
                command, env=child_environment(), timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise StepFailed(f"{what} still runs after {timeout:g} s") from exc
        expected_code = code if code is not None else 0
        output = (done.stdout + done.stderr).decode(errors="replace").strip()
        if done.returncode != expected_code:
            raise StepFailed(
                f"{what} exited {done.returncode}, expected {expected_code}: {output[-600:]}"
            )
        said = (done.stdout if done.returncode == 0 else done.stderr).decode(errors="replace")
        lines = [line for line in said.splitlines() if line.strip() and not line.startswith("{")]
        shown = lines[0] if done.returncode else (lines[-1] if lines else "")
        return f"exit {done.returncode}" + (f": {shown.strip()}" if shown else "")

    def do_append(self, step: AppendStep) -> str:
        assert step.collection is not None
        process = self.run.process_of(step)
        body = "".join(json.dumps(row, default=json_default) + "\n" for row in step.rows)
        expected = step.expect_http or (200,)
        # As a client would: a 503 (writes paused: a leader taking its leadership back, an
        # outage) is retried after its Retry-After with the same Idempotency-Key, so a retry
        # lands at most once, until the step's timeout; unless a 503 or a refusal is expected.
        timeout = self.run.timeout_of(step, 15.0)
        retries = 503 not in expected and not step.refused
        answer = process.append(
            step.collection, body.encode(), key=f"scenario-{uuid.uuid4().hex}",
            deadline=time.monotonic() + timeout if retries else 0.0, timeout=timeout,
        )  # fmt: skip
        if step.refused:
            if answer.ok:
                raise StepFailed(
                    f"{process.name} acknowledged a write that must be refused: {answer.summary()}"
                )
            return f"refused: {answer.summary()}"
        if answer.status not in expected:
            raise StepFailed(
                f"append to {process.name} answered {answer.summary()}, expected HTTP "
                f"{'/'.join(map(str, expected))}"
            )
        if answer.ok:
            data = json.loads(answer.body or b"{}")
            self.run.acked.append(AppendRecord(process.name, step.collection, step.rows, data))
            return f"HTTP {answer.status}: ts {data.get('ts')}, shard {data.get('shard_id')}"
        return answer.summary()

    def do_read(self, step: ReadStep) -> str:
        assert step.collection is not None
        process = self.run.process_of(step)
        answer, rows = self.run.read_rows(
            process, step.collection, step.as_of, self.run.timeout_of(step, 30.0)
        )
        expected_http = step.expect_http or (200,)
        if answer.status not in expected_http:
            raise StepFailed(
                f"read from {process.name} answered {answer.summary()}, expected HTTP "
                f"{'/'.join(map(str, expected_http))}"
            )
        if not answer.ok:
            return answer.summary()
        count = sum(row_multiset(rows).values())
        if step.expect_count is not None and count != step.expect_count:
            raise StepFailed(
                f"read {count} row(s) of {step.collection} from {process.name}, expected "
                f"{step.expect_count}: {rows[:5]}"
            )
        if step.expect_rows is not None:
            got = row_multiset(rows)
            want = row_multiset(step.expect_rows)
            if got != want:
                missing = list((want - got).elements())
                extra = list((got - want).elements())
                raise StepFailed(
                    f"rows of {step.collection} read from {process.name} differ: missing "
                    f"{missing[:5]}, unexpected {extra[:5]}"
                )
        return f"{count} row(s)"

    def do_sustain(self, step: SustainStep) -> str:
        """A sustained-write phase (:mod:`orchestrator.scenario.sustain`): every append it
        acknowledged is recorded, as an ``append`` step's is."""
        process = self.run.process_of(step)
        phase = SustainedWrites(
            process, step.collection, step.rows, step.seconds, step.clients,
            step.max_read_seconds or DEFAULT_MAX_READ_SECONDS,
        )  # fmt: skip
        try:
            done = phase.run()
        except AssertionError as exc:
            raise StepFailed(f"sustained writes to {process.name}: {exc}") from None
        finally:
            self.run.acked.extend(
                AppendRecord(process.name, step.collection, step.rows, answer)
                for answer in phase.acknowledged
            )
        return done

    def do_stop(self, step: StopStep) -> str:
        process = self.run.process_of(step)
        process.terminate()
        timeout = self.run.timeout_of(step, 15.0)
        code = process.wait_exit(timeout)
        process.exit_expected = True
        if code is None:
            raise StepFailed(f"{process.name} did not exit within {timeout:g} s of SIGTERM")
        expected = step.code if step.code is not None else 0
        if code != expected:
            raise StepFailed(f"{process.name} exited with code {code}, expected {expected}")
        return f"exited {code}"

    def do_expect_exit(self, step: ExpectExitStep) -> str:
        assert step.code is not None
        process = self.run.process_of(step)
        timeout = self.run.timeout_of(step)
        code = process.wait_exit(timeout)
        if code is None:
            raise StepFailed(
                f"{process.name} still runs after {timeout:g} s (expected exit {step.code})"
            )
        process.exit_expected = True
        if code != step.code:
            raise StepFailed(f"{process.name} exited with code {code}, expected {step.code}")
        if step.log_contains and step.log_contains not in process.log_text():
            raise StepFailed(f"the log of {process.name} does not mention {step.log_contains!r}")
        return f"exited {code}"

    def do_expect_status(self, step: ExpectStatusStep) -> str:
        assert step.path is not None
        path = step.path
        problem: str | None = None

        def look(watch: Watch) -> str | NotYet:
            nonlocal problem
            if step.timeout is not None:
                with contextlib.suppress(*CONNECTION_ERRORS):
                    self.run.arm_status_watches(watch)
            value: Any = None
            try:
                document = self.run.status()
            except CatalogError as exc:
                problem = f"status unreadable: {exc.message}"
            else:
                value = resolve_path(document, path)
                problem = compare(value, step.comparator or "equals", step.expected)
            if problem is None:
                shown = "absent" if is_missing(value) else json.dumps(value, default=str)[:200]
                return f"{path} = {shown}"
            return NOT_YET

        try:
            return wait_until(look, step.timeout or 0.0, safety=0.5)
        except WaitTimeout:
            raise StepFailed(f"status {path}: {problem}") from None

    def do_sleep(self, step: SleepStep) -> str:
        assert step.seconds is not None
        time.sleep(step.seconds)  # deliberate: the scenario lets time pass
        return f"slept {step.seconds:g} s"
