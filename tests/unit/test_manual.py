"""The manual's one page list (the nav) and its generated figures."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from support import manual

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

generated = manual.generated()
_hook = manual.docs_hook
pages, values, markers = _hook("pages"), _hook("values"), _hook("markers")


def _nav() -> list[str]:
    """The nav's pages, sections flattened."""
    pages_: list[str] = []
    for entry in generated.nav():
        value = next(iter(entry.values()))
        pages_ += [next(iter(p.values())) for p in value] if isinstance(value, list) else [value]
    return pages_


def test_every_page_reads_complete_and_its_generated_text_is_current() -> None:
    """Each generated value or block sits in the page's source between its markers, as the
    generators write it now (``make docs-update`` rewrites a stale page)."""
    for path in generated.pages():
        assert not markers.unwritten(path.read_text()), path.name
    stale = generated.stale()
    assert not stale, "run make docs-update:\n" + "\n".join(
        f"{path.name}:\n{diff}" for path, diff in stale.items()
    )


def test_every_block_marker_has_a_generator() -> None:
    assert generated.Generator().blocks == set(markers.BLOCKS)


def test_markers_are_written_and_rendered() -> None:
    page = "a <!-- count x -->\n<!-- pages -->\nb <!-- count y -->2<!-- /count --> c"
    made = markers.rewritten(page, lambda m: "LIST" if m.block else "1")
    assert made == (
        "a <!-- count x -->1<!-- /count -->\n<!-- pages -->\n\nLIST\n\n<!-- /pages -->\n"
        "b <!-- count y -->1<!-- /count --> c"
    )
    assert markers.unwritten(page) == ["<!-- count x -->", "<!-- pages -->"]
    assert markers.rendered(made) == "a 1\n\n\nLIST\n\n\nb 1 c"
    assert markers.rewritten(made, lambda m: "LIST" if m.block else "1") == made


def test_every_page_is_in_the_nav_once_and_every_nav_entry_is_a_page() -> None:
    nav = _nav()
    assert len(nav) == len(set(nav))
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_nav_has_a_path_per_reader() -> None:
    nav = generated.nav()
    sections = [next(iter(e)) for e in nav if isinstance(next(iter(e.values())), list)]
    assert sections == ["What it is", "Integrate", "Operate", "Contribute"]


def test_every_page_but_home_says_what_it_holds() -> None:
    for name in _nav():
        if name != "index.md":
            assert pages.description(DOCS / name), name


def test_the_readme_points_to_the_manual_and_keeps_no_page_list() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/index.md" in readme
    assert not re.findall(r"\]\(docs/(?!index\.md)[\w-]+\.md\)", readme)


def test_every_figure_marker_names_something() -> None:
    found = [m for page in DOCS.glob("*.md") for m in markers.markers(page.read_text())]
    assert len([m for m in found if not m.block]) > 50
    for marker in found:
        assert marker.text is not None and marker.text.strip() not in ("", "None"), marker


def test_a_result_is_read_by_its_path_of_keys() -> None:
    import json

    runs = json.loads((values.RESULTS / "appends.json").read_text())
    local = [run for run in runs.values() if run.get("store") == "local"][-1]
    level = next(lv for lv in local["levels"] if (lv["format"], lv["clients"]) == ("arrow", 16))
    name = "appends.json:current.levels[format=arrow,clients=16].step_ms.parse"
    assert values.result(name) == level["step_ms"]["parse"]
    assert values.value("result", "cutover.json:@last.summary", None)
    assert values.value("result", "spark_connect.json:speedup", ".1f").count(".") == 1


def test_a_default_is_read_from_the_code() -> None:
    from orchestrator.http.exchange import ServerLimits

    assert values.default("orchestrator.http.exchange:ServerLimits.workers") == (
        ServerLimits().workers
    )


def test_help_names_the_variable_of_every_option_that_has_one() -> None:
    from click.testing import CliRunner

    from orchestrator.cli import main

    reference = _hook("clireference")
    runner = CliRunner()
    checked = 0
    for name, command in reference.commands():
        if command.hidden:
            continue
        shown = " ".join(runner.invoke(main, [*name.split(), "--help"]).output.split())
        for param in command.params:
            if getattr(param, "envvar", None):
                assert f"env var: {param.envvar}" in shown, (name, param.name)
                checked += 1
    assert checked > 50  # every command that connects has several


def test_the_cli_page_lists_every_variable_the_product_reads() -> None:
    reference = _hook("clireference")
    table = reference.variables()
    assert "CATALOG_UPGRADE_ZK`" in table and "CATALOG_UPGRADE_CONNECT_TIMEOUT" in table
    read = set(re.findall(r"CATALOG_UPGRADE_[A-Z_]+[A-Z]", table))
    sources = "\n".join(p.read_text() for p in (ROOT / "orchestrator").rglob("*.py"))
    sources += "\n".join(p.read_text() for p in (ROOT / "catalog").rglob("*.py"))
    named = set(re.findall(r'"(CATALOG_UPGRADE_[A-Z_]+[A-Z])"', sources))
    assert named <= read, named - read


def test_every_benchmark_target_reads_a_measured_figure() -> None:
    """Each target of benchmarks/targets.py finds its figure in the results (a renamed field
    would otherwise show 'not run' on the page)."""
    spec = importlib.util.spec_from_file_location("targets", ROOT / "benchmarks" / "targets.py")
    assert spec is not None and spec.loader is not None
    targets = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = targets
    spec.loader.exec_module(targets)
    assert len(targets.TARGETS) >= 20
    for target in targets.TARGETS:
        assert target.measured() is not None, target.name


#: A measured figure typed into prose, in the manual or the README: a latency, a rate, a
#: ratio, a percentage or a time something takes. Such a figure comes from a results file
#: through a marker (``<!-- result ... -->``) instead.
_TYPED_FIGURE = re.compile(
    r"\b\d[\d,.]*\s?(?:ms|rows/s|appends/s|appends a second|MiB/s|MB/s)\b"
    r"|\b\d+(?:\.\d+)?x\b|\bp(?:50|99) \d|\b\d+(?:\.\d+)?%"
    # A duration measured (a default or a budget is a rule, not a measurement):
    r"|\b(?:about|in|took|takes|within) \d[\d,.]*\s?(?:s|seconds?|min|minutes?)\b"
)


def test_no_measured_figure_is_typed_into_prose() -> None:
    typed = []
    for page in generated.pages():
        source = page.read_text()
        text, at = "", 0
        for marker in markers.markers(source):  # the generated text goes, with its markers
            text, at = text + source[at : marker.start], marker.end
        text += source[at:]
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # sample output
        text = re.sub(r"`[^`]*`", "", text)  # commands and sample lines
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
        typed += [f"{page.name}: {m.group(0)}" for m in _TYPED_FIGURE.finditer(text)]
    assert not typed, typed



#: A path of this repository as a page names it: `orchestrator/wire/ipc.py`, `docs/...`.
_SOURCE_PATH = re.compile(
    r"`((?:orchestrator|catalog|client|benchmarks|tests|deploy|scenarios|docs)/[\w/.-]+)`"
)


def test_every_source_path_a_page_names_exists() -> None:
    """A module moved leaves no page pointing at where it was."""
    missing = [
        f"{page.name}: {m.group(1)}"
        for page in [*generated.pages(), ROOT / "README.md"]
        for m in _SOURCE_PATH.finditer(page.read_text())
        if not (ROOT / m.group(1)).exists()
    ]
    assert not missing, missing


def test_every_results_file_names_what_ran() -> None:
    hook = _hook("benchmarks")
    table = hook.runs(hook.RESULTS)
    rows = table.splitlines()[2:]
    for path in hook.RESULTS.glob("*.json"):
        assert f"`{path.name}`" in table
    assert all(re.search(r"\| \d{4}-\d{2}-\d{2}, [0-9a-f]{7}", row) for row in rows), rows


def test_the_pages_name_every_type_a_post_takes_and_the_token_statuses() -> None:
    """Claims bound to the code: every Content-Type a POST takes is named where the manual
    lists them, and a missing token is 401, a wrong one 403, as the server answers."""
    from orchestrator.sidecar.api import POST_TYPES
    from orchestrator.sidecar.refusals import refusal_named

    for page in ("operating.md", "http-api.md"):
        text = (DOCS / page).read_text()
        missing = [t for t in sorted(POST_TYPES) if f"`{t}`" not in text]
        assert not missing, f"{page} does not name {missing}"
    assert refusal_named("unauthorized").status == 401
    assert "a wrong token" in refusal_named("forbidden").when
    assert "Without the header a request answers 401, with a wrong token" in (
        DOCS / "operating.md"
    ).read_text().replace("\n", " ")


def test_no_table_is_broken_by_a_sentence() -> None:
    """A line of prose right after a table row renders as a bogus row: the build's hook
    (``docs/hooks/tables.py``) refuses it, and so does this test, on every page."""
    tables = _hook("tables")
    assert tables.broken_tables("| a |\n| --- |\n| 1 |\nprose\n") == ["4: prose"]
    broken = [f"{p.relative_to(DOCS)}:{line}" for p in sorted(DOCS.rglob("*.md"))
              for line in tables.broken_tables(p.read_text())]  # fmt: skip
    assert not broken, "prose right after a table row:\n" + "\n".join(broken)


def test_the_client_page_names_every_public_method() -> None:
    from catalog_client import SidecarClient

    text = (DOCS / "http-api.md").read_text()
    public = [n for n in vars(SidecarClient) if not n.startswith("_")]
    missing = [n for n in public if f"| `{n}(" not in text]
    assert len(public) > 10 and not missing, missing


def test_every_runnable_example_is_run_or_says_why() -> None:
    """Each block a reader can run is in one story of ``tests/integration/test_examples.py``, or
    its annotation says why not; each story names blocks that exist, once, and has its test; a
    quoted block is in the file it names; a block without a language holds no command."""
    from support import examples

    found = examples.blocks()
    in_stories = [b for name in examples.STORIES for b in examples.story(name)]
    assert len(in_stories) == len(set(in_stories)), "a block is in two stories"
    unaccounted = [str(b) for b in found if b.runnable and b.note is None and b not in in_stories]
    assert not unaccounted, "runnable, in no story and not saying why:\n" + "\n".join(unaccounted)
    annotated = [b for b in in_stories if b.note is not None]
    assert not annotated, f"run by a story, yet annotated: {annotated}"
    for block in found:
        if block.note is None:
            continue
        if block.note.startswith(examples.NOT_RUN):
            assert len(block.note) > len(examples.NOT_RUN) + 10, f"{block}: say why"
        else:
            assert block.note.startswith(examples.QUOTED), f"{block}: unknown note {block.note!r}"
            source = (ROOT / block.note.removeprefix(examples.QUOTED)).read_text()
            lines = [re.sub(r"\s+#.*", "", line).strip() for line in block.text.splitlines()]
            missing = [line for line in lines if line and line not in source]
            assert not missing, f"{block} quotes what its file does not hold: {missing}"
    commands = re.compile(r"^(\$ |catalog-upgrade |curl |make |pip )", re.M)
    hidden = [str(b) for b in found if not b.language and commands.search(b.text)]
    assert not hidden, f"commands in a block without a language: {hidden}"
    tests = (ROOT / "tests" / "integration" / "test_examples.py").read_text()
    stories = set(re.findall(r"^def test_story_(\w+)\(", tests, re.M))
    assert stories == set(examples.STORIES), stories ^ set(examples.STORIES)


def test_a_reader_types_commands_as_written() -> None:
    """Continued lines are joined; a console block's output is not a command; the documented
    ports are mapped, and ZooKeeper is started on its mapped port."""
    from support.examples import Block, Reader, commands

    shell = Block("p.md", 1, "sh", "a \\\n  --b 1 &  # c\n# only a comment\n\nd\n", None)
    assert commands(shell) == ["a --b 1 &  # c", "d"]
    console = Block("p.md", 1, "console", "$ x \\\n  y\noutput\n$ z\n", None)
    assert commands(console) == ["x y", "z"]
    reader = Reader.__new__(Reader)
    reader.ports = {2181: 1, 8081: 2}
    said = reader.mapped("catalog-upgrade zookeeper & curl localhost:8081/x --zk h:2181 :80810")
    assert said == "catalog-upgrade zookeeper --port 1 & curl localhost:2/x --zk h:1 :80810"


def test_a_runbook_says_how_long_its_alert_waits_through_a_marker() -> None:
    """Each runbook whose alert waits before it fires (its ``for``) says how long through an
    ``alert`` marker, written from ``deploy/prometheus/alerts.yaml``; no "for five minutes"
    is typed into a runbook."""
    import yaml

    text = (DOCS / "runbooks.md").read_text()
    rules = [r for g in yaml.safe_load(values.ALERTS.read_text())["groups"] for r in g["rules"]]
    named = {m.args.strip().partition(":")[0] for m in markers.markers(text) if m.kind == "alert"}
    assert named <= {r["alert"] for r in rules}, named
    typed = re.compile(
        r"\bfor (?:a|an|one|two|three|five|ten|six|\d+) (?:second|minute|hour|day)s?\b", re.I
    )
    found = typed.findall(re.sub(r"<!-- alert .*?<!-- /alert -->", "", text, flags=re.S))
    assert not found, f"typed waits in the runbooks: {found}"
    # Those whose runbook states the wait: all but the ones that fire within a minute, or
    # whose wait is a rule of their expression (bound with ``:threshold`` where it is typed).
    stated = {r["alert"] for r in rules if str(r.get("for", "0m")) not in ("0m", "1m")}
    unbound = stated - named - {
        "CatalogUpgradePhaseSlow", "CatalogUpgradeFinalizationOverdue",
        "CatalogUpgradeFleetGenerationUnpromoted", "CatalogUpgradeFleetFinalizationOverdue",
    }  # fmt: skip
    assert not unbound, unbound
