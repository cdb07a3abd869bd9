"""The scenario file format: strict validation, located problems, status paths, TOML output."""

from __future__ import annotations

import tomllib
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from catalog.errors import EXIT_BAD_INPUT, BadInputError
from orchestrator.cli import main
from orchestrator.scenario import compare, load_all, row_multiset
from orchestrator.scenario.format import (
    STEP_KINDS,
    ReleaseIndex,
    is_missing,
    load_scenario,
    parse_path,
    parse_scenario,
    resolve_path,
)
from orchestrator.scenario.format.steps import ExpectExitStep, StartStep, Step
from orchestrator.scenario.format.structure import FieldProblem, build_step

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
FIXTURE_RELEASES = Path(__file__).resolve().parents[1] / "fixtures" / "broken_releases"


@pytest.fixture(scope="module")
def indexes() -> dict[Path, ReleaseIndex]:
    """One release index per directory for the whole module (loading imports the releases)."""
    return {}


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    """A directory holding a scenario file next to a copy of a small release history."""
    releases = tmp_path / "releases"
    releases.mkdir()
    source = FIXTURE_RELEASES / "missing_instruction"
    for path in source.glob("*.py"):
        (releases / path.name).write_text(path.read_text())
    return tmp_path


HEADER = 'releases = "releases"\n'
START = """
[[step]]
action = "start"
process = "a"
release = "0.1.0"
generation = 1
"""


def problems_of(text: str, where: Path) -> BadInputError:
    with pytest.raises(BadInputError) as caught:
        parse_scenario(text, where / "s.toml")
    return caught.value


def test_every_suite_scenario_is_valid(indexes: dict[Path, ReleaseIndex]) -> None:
    """Each scenario of the shipped suite parses and validates."""
    files = sorted(SCENARIOS.glob("*.toml"))
    assert len(files) >= 12
    for file in files:
        scenario = load_scenario(file, indexes=indexes)
        assert scenario.steps, file


def test_a_minimal_scenario_parses(scenario_dir: Path) -> None:
    """A start step yields a Step with its process, release file, generation and line."""
    scenario = parse_scenario(HEADER + START, scenario_dir / "s.toml")
    (step,) = scenario.steps
    assert isinstance(step, StartStep)
    assert (step.action, step.process, step.generation, step.line) == ("start", "a", 1, 3)
    assert scenario.release_file("0.1.0").name == "v0_1_0.py"
    assert scenario.defaults.session_timeout == 2.0
    assert scenario.defaults.invariants is True


def test_unknown_action_is_located(scenario_dir: Path) -> None:
    """An unknown action is refused with the step number, its line and the field."""
    error = problems_of(HEADER + START + '\n[[step]]\naction = "explode"\n', scenario_dir)
    assert error.exit_code == EXIT_BAD_INPUT
    assert (error.details["step"], error.details["line"], error.details["field"]) == (
        2,
        10,
        "action",
    )


def test_unknown_field_names_its_own_line(scenario_dir: Path) -> None:
    """An unknown field of a known action points at the field's own line."""
    text = HEADER + START + '\n[[step]]\naction = "kill"\nprocess = "a"\nsignal = 9\n'
    error = problems_of(text, scenario_dir)
    assert (error.details["step"], error.details["line"], error.details["field"]) == (
        2,
        12,
        "signal",
    )


def test_field_of_another_action_is_refused(scenario_dir: Path) -> None:
    """A real field used by the wrong action (``code`` on wait) is refused, not ignored."""
    wait = '\n[[step]]\naction = "wait"\nprocess = "a"\nstate = "ready"\ncode = 3\n'
    text = HEADER + START + wait
    error = problems_of(text, scenario_dir)
    assert error.details["field"] == "code"


def test_every_problem_is_reported_at_once(scenario_dir: Path) -> None:
    """All problems of a file are collected, not only the first."""
    text = (
        HEADER
        + START
        + '\n[[step]]\naction = "nope"\n'
        + '\n[[step]]\naction = "wait"\nprocess = "a"\nstate = "asleep"\n'
        + '\n[[step]]\naction = "sleep"\n'
    )
    error = problems_of(text, scenario_dir)
    problems = error.details["problems"]
    assert [(p["step"], p["field"]) for p in problems] == [
        (2, "action"),
        (3, "state"),
        (4, None),
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("generation", '"one"'),
        ("generation", "0"),
        ("auto_promote", '"yes"'),
        ("session_timeout", "0.5"),
        ("process", '"has space"'),
        ("release", '""'),
        ("crash_before_write", "0"),
        ("crash_before_write", '"3"'),
        ("lose_answer_after_write", "0"),
    ],
)
def test_wrongly_typed_start_fields_are_refused(scenario_dir: Path, field: str, value: str) -> None:
    """Values of the wrong type or range are refused and name the field."""
    base = {"process": '"a"', "release": '"0.1.0"', "generation": "1"}
    base[field] = value
    body = "".join(f"{k} = {v}\n" for k, v in base.items())
    error = problems_of(HEADER + '\n[[step]]\naction = "start"\n' + body, scenario_dir)
    assert error.details["field"] == field


def test_missing_required_field_is_refused(scenario_dir: Path) -> None:
    """A step missing a required field is refused with its step number."""
    error = problems_of(HEADER + '\n[[step]]\naction = "start"\nprocess = "a"\n', scenario_dir)
    assert error.details["step"] == 1
    assert len(error.details["problems"]) == 2  # release and generation


def test_process_must_be_started_before_use(scenario_dir: Path) -> None:
    """A step acting on a process no earlier step started is refused."""
    error = problems_of(HEADER + '\n[[step]]\naction = "kill"\nprocess = "ghost"\n', scenario_dir)
    assert (error.details["step"], error.details["field"]) == (1, "process")


def test_a_process_name_is_started_once(scenario_dir: Path) -> None:
    """Restarting under the same name is refused (a restart is a new process)."""
    error = problems_of(HEADER + START + START, scenario_dir)
    assert (error.details["step"], error.details["field"]) == (2, "process")


def test_unknown_release_version_is_refused(scenario_dir: Path) -> None:
    """A version the release directory does not have is refused before anything runs."""
    error = problems_of(HEADER + START.replace("0.1.0", "9.9.9"), scenario_dir)
    assert error.details["field"] == "release"


def test_release_may_be_a_file_next_to_the_scenario(scenario_dir: Path) -> None:
    """``release = "path.py"`` names a release file relative to the scenario."""
    text = HEADER + START.replace('"0.1.0"', '"releases/v0_2_0.py"')
    scenario = parse_scenario(text, scenario_dir / "s.toml")
    assert scenario.release_file("releases/v0_2_0.py").name == "v0_2_0.py"


def test_missing_release_directory_is_refused(scenario_dir: Path) -> None:
    """``releases`` must name an existing directory."""
    error = problems_of('releases = "nowhere"\n' + START, scenario_dir)
    assert error.details["field"] == "releases"


def test_unknown_top_level_and_default_keys(scenario_dir: Path) -> None:
    """Unknown top-level keys and [defaults] keys are refused."""
    text = 'colour = "red"\n' + HEADER + "[defaults]\nspeed = 3\n" + START
    error = problems_of(text, scenario_dir)
    assert [p["field"] for p in error.details["problems"]] == ["colour", "speed"]


def test_invalid_toml_is_bad_input(scenario_dir: Path) -> None:
    """A TOML syntax error is a BadInputError naming the file."""
    error = problems_of(HEADER + "[[step]\n", scenario_dir)
    assert error.details["path"].endswith("s.toml")


def test_no_steps_is_refused(scenario_dir: Path) -> None:
    """A scenario without steps is refused."""
    problems_of(HEADER, scenario_dir)


def test_expect_status_needs_exactly_one_comparator(scenario_dir: Path) -> None:
    """expect_status takes one of equals/not_equals/length/contains/exists."""
    text = HEADER + '\n[[step]]\naction = "expect_status"\npath = "catalog.version"\n'
    assert problems_of(text, scenario_dir).details["step"] == 1
    both = text + 'equals = "1"\nlength = 1\n'
    assert problems_of(both, scenario_dir).details["step"] == 1


def test_only_start_takes_several_processes(scenario_dir: Path) -> None:
    """``process = [...]`` is for starting processes together only."""
    text = (
        HEADER
        + START.replace('"a"', '["a", "b"]')
        + '\n[[step]]\naction = "kill"\nprocess = ["a", "b"]\n'
    )
    error = problems_of(text, scenario_dir)
    assert (error.details["step"], error.details["field"]) == (2, "process")


def test_refused_and_expect_http_are_exclusive(scenario_dir: Path) -> None:
    """An append expects either a refusal or given HTTP statuses, not both."""
    text = (
        HEADER
        + START
        + '\n[[step]]\naction = "append"\nprocess = "a"\ncollection = "mz_catalog.mz_tables"\n'
        + 'rows = [{ id = "x" }]\nrefused = true\nexpect_http = 409\n'
    )
    assert problems_of(text, scenario_dir).details["field"] == "refused"


def test_every_action_documents_itself() -> None:
    """Every step kind has a help text, and every field of it names a known check."""
    from orchestrator.scenario.format.fields import FIELDS

    for name, kind in STEP_KINDS.items():
        assert kind.help and kind.action == name, name
        checks = {f.metadata["check"] for f in attrs.fields(kind) if "check" in f.metadata}
        assert checks <= set(FIELDS), name


def test_steps_built_in_code_are_validated_too() -> None:
    """A step built in code (as the simulation does) passes the same checks on structure."""
    built = build_step(1, 0, {"action": "start", "process": ["a", "b"], "release": "0.1.0",
                              "generation": 2, "session_timeout": 3})  # fmt: skip
    assert isinstance(built, StartStep) and built.processes == ("a", "b")
    assert built.session_timeout == 3.0 and isinstance(built.session_timeout, float)
    problems = build_step(1, 0, {"action": "wait", "process": ["a", "b"], "state": "ready"})
    assert problems == [FieldProblem("only start takes several processes", "process")]


def test_status_paths_resolve() -> None:
    """Keys, indexes, first-match and all-match selectors (values may contain dots)."""
    doc = {
        "catalog": {"version": "0.11.0"},
        "collections": [
            {"name": "mz_catalog.mz_roles", "shard_id": "s1"},
            {"name": "mz_catalog.mz_tables", "shard_id": "s2"},
        ],
        "events": [{"kind": "ready"}, {"kind": "promoted"}, {"kind": "ready"}],
    }
    assert resolve_path(doc, "catalog.version") == "0.11.0"
    assert resolve_path(doc, "collections[name=mz_catalog.mz_tables].shard_id") == "s2"
    assert resolve_path(doc, "events[-1].kind") == "ready"
    assert len(resolve_path(doc, "events[*kind=ready]")) == 2
    assert is_missing(resolve_path(doc, "collections[name=nope].shard_id"))
    assert is_missing(resolve_path(doc, "events[7]"))


@pytest.mark.parametrize("path", ["", "a..b", "a[x]", "a[=v]", "1abc"])
def test_invalid_status_paths_are_refused(path: str) -> None:
    """Malformed paths are BadInputError."""
    with pytest.raises(BadInputError):
        parse_path(path)


def test_comparisons() -> None:
    """Comparators treat 1 and 1.0 alike, and report what they saw otherwise."""
    assert compare(3, "equals", 3.0) is None
    assert compare(True, "equals", 1) is not None
    assert compare([1, 2], "length", 2) is None
    assert compare("abc", "contains", "b") is None
    assert compare(resolve_path({}, "x"), "exists", False) is None
    assert compare(resolve_path({}, "x"), "equals", 1) is not None


def test_rows_compare_as_multisets_with_diffs() -> None:
    """Null columns and _ts are ignored; _diff counts a row that many times."""
    read = [{"id": "u1", "note": None, "_ts": 3, "_diff": 2}]
    assert row_multiset(read) == row_multiset([{"id": "u1"}, {"id": "u1"}])


def test_steps_print_back_as_valid_toml(scenario_dir: Path) -> None:
    """Step.to_toml round-trips through the parser (simulate prints failing walks this way)."""
    text = (
        HEADER
        + START
        + '\n[[step]]\naction = "append"\nprocess = "a"\ncollection = "mz_catalog.mz_tables"\n'
        + 'rows = [{ id = "x", name = "q\\"uote" }]\nrefused = true\nnote = "n"\n'
        + '\n[[step]]\naction = "expect_status"\npath = "catalog.version"\nequals = "0.1.0"\n'
    )
    scenario = parse_scenario(text, scenario_dir / "s.toml")
    printed = HEADER + "\n\n".join(step.to_toml() for step in scenario.steps)
    tomllib.loads(printed)
    again = parse_scenario(printed, scenario_dir / "s.toml")

    def unlocated(steps: tuple[Step, ...]) -> list[Step]:
        return [attrs.evolve(s, line=0) for s in steps]

    assert unlocated(again.steps) == unlocated(scenario.steps)


def test_restarting_zookeeper_needs_the_embedded_server() -> None:
    """With an external ZooKeeper, a scenario restarting it is refused before anything runs."""
    with pytest.raises(BadInputError) as caught:
        load_all([SCENARIOS / "zookeeper_restart.toml"], restartable=False)
    assert caught.value.details["step"] == 6


def test_cli_run_refuses_an_invalid_file_with_exit_2(scenario_dir: Path) -> None:
    """`scenario run` validates first: an invalid file exits 2 and nothing starts."""
    bad = scenario_dir / "bad.toml"
    bad.write_text(HEADER + '\n[[step]]\naction = "teleport"\n')
    result = CliRunner().invoke(main, ["scenario", "run", str(bad), "--zk", "127.0.0.1:1"])
    assert result.exit_code == EXIT_BAD_INPUT
    external = ["scenario", "run", str(SCENARIOS / "zookeeper_restart.toml"), "--zk", "h:1"]
    assert CliRunner().invoke(main, external).exit_code == EXIT_BAD_INPUT


def test_crash_before_write_parses_and_round_trips(scenario_dir: Path) -> None:
    """A start step's failpoint is kept, shown in the timeline and printed back as TOML."""
    scenario = parse_scenario(HEADER + START + "crash_before_write = 3\n", scenario_dir / "s.toml")
    (step,) = scenario.steps
    assert isinstance(step, StartStep) and step.crash_before_write == 3
    assert "crashing before leader write 3" in step.describe()
    assert "crash_before_write = 3" in step.to_toml()


def test_lose_answer_after_write_parses_and_round_trips(scenario_dir: Path) -> None:
    """A start step's lost-answer failpoint is kept, shown and printed back as TOML."""
    text = HEADER + START + "lose_answer_after_write = 2\n"
    (step,) = parse_scenario(text, scenario_dir / "s.toml").steps
    assert isinstance(step, StartStep) and step.lose_answer_after_write == 2
    assert "losing the answer of leader write 2" in step.describe()
    assert "lose_answer_after_write = 2" in step.to_toml()


def test_expect_exit_takes_a_signal_as_a_negative_code(scenario_dir: Path) -> None:
    text = HEADER + START + '\n[[step]]\naction = "expect_exit"\nprocess = "a"\ncode = -9\n'
    step = parse_scenario(text, scenario_dir / "s.toml").steps[1]
    assert isinstance(step, ExpectExitStep) and step.code == -9


def test_a_workload_table_parses_and_bad_values_are_named(scenario_dir: Path) -> None:
    text = HEADER + "[workload]\nclients = 3\nrate = 5\n" + START
    workload = parse_scenario(text, scenario_dir / "s.toml").workload
    assert workload is not None and (workload.clients, workload.rate) == (3, 5.0)
    assert workload.collection == "mz_catalog.mz_tables" and workload.op_timeout == 20.0
    bad = HEADER + '[workload]\nclients = 0\nrate = "fast"\ncollection = "x"\nspeed = 1\n' + START
    with pytest.raises(BadInputError) as caught:
        parse_scenario(bad, scenario_dir / "s.toml")
    message = caught.value.message
    for expected in ("clients must be 1 to 64", "[workload] rate", "SCHEMA.NAME", "'speed'"):
        assert expected in message, message


def test_a_zookeeper_server_is_cut_from_its_peers_only_in_an_ensemble(scenario_dir: Path) -> None:
    """partition_zookeeper needs an ensemble, and a scenario partitions processes or servers,
    not both; well-formed, its servers run in namespaces (partitions_zookeeper)."""
    cut = '\n[[step]]\naction = "partition_zookeeper"\nserver = "leader"\n'
    error = problems_of(HEADER + START + cut, scenario_dir)
    assert "zookeeper_servers = 3" in error.message and error.details["step"] == 2
    ensemble = HEADER + "[defaults]\nzookeeper_servers = 3\n" + START
    both = ensemble + cut + '\n[[step]]\naction = "partition"\nprocess = "a"\ncut = "clients"\n'
    error = problems_of(both, scenario_dir)
    assert "not both" in error.message and error.details["step"] == 3
    heal = '\n[[step]]\naction = "heal_zookeeper"\nserver = 4\n'
    error = problems_of(ensemble + cut + heal, scenario_dir)
    assert error.details["field"] == "server"
    scenario = parse_scenario(ensemble + cut + '\n[[step]]\naction = "heal_zookeeper"\n',
                              scenario_dir / "s.toml")  # fmt: skip
    assert scenario.partitions_zookeeper and scenario.needs_namespaces
    assert not scenario.partitioned


def test_pace_steps_take_a_generation_and_a_rate_or_off() -> None:
    throttle = build_step(1, 0, {"action": "throttle", "generation": 2, "rows_per_second": "off"})
    assert not isinstance(throttle, list) and throttle.describe() == (
        "throttle generation 2 to off rows/s"
    )
    for bad in (-1, 0, "fast", True):
        problems = build_step(1, 0, {"action": "throttle", "generation": 2,
                                     "rows_per_second": bad})  # fmt: skip
        assert isinstance(problems, list) and problems[0].field == "rows_per_second", bad
    paused = build_step(1, 0, {"action": "pause_steps", "generation": 3})
    assert not isinstance(paused, list) and paused.describe() == (
        "pause the long steps of generation 3"
    )
    started = build_step(1, 0, {"action": "start", "process": "g", "release": "0.11.0",
                                "generation": 2, "copy_rate": 0.5})  # fmt: skip
    assert isinstance(started, StartStep) and started.copy_rate == 0.5
