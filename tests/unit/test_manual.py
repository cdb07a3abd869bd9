"""The manual's one page list (the nav) and its generated figures."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hook(name: str) -> ModuleType:
    """A hook module of the build, loaded as MkDocs loads it: from its file."""
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pages, values = _hook("pages"), _hook("values")


def _nav() -> list[str]:
    """The nav's pages, sections flattened."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    pages_: list[str] = []
    for entry in config["nav"]:
        value = next(iter(entry.values()))
        pages_ += [next(iter(p.values())) for p in value] if isinstance(value, list) else [value]
    return pages_


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's tags (a Python name for the Mermaid fence) read as plain strings."""


_Loader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: loader.construct_scalar(node)
)


def test_every_page_is_in_the_nav_once_and_every_nav_entry_is_a_page() -> None:
    nav = _nav()
    assert len(nav) == len(set(nav))
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_nav_has_a_path_per_reader() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    sections = [next(iter(e)) for e in config["nav"] if isinstance(next(iter(e.values())), list)]
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
    found = [m for page in DOCS.glob("*.md") for m in values._MARKER.finditer(page.read_text())]
    assert found
    for match in found:
        assert values._value(*match.groups()) not in ("", "None")


def test_a_result_is_read_by_its_path_of_keys() -> None:
    import json

    runs = json.loads((values.RESULTS / "appends.json").read_text())
    local = [run for run in runs.values() if run.get("store") == "local"][-1]
    level = next(lv for lv in local["levels"] if (lv["format"], lv["clients"]) == ("arrow", 16))
    name = "appends.json:current.levels[format=arrow,clients=16].step_ms.parse"
    assert values.result(name) == level["step_ms"]["parse"]
    assert values._value("result", "cutover.json:@last.summary", None)
    assert values._value("result", "spark_connect.json:speedup", ".1f").count(".") == 1


def test_a_default_is_read_from_the_code() -> None:
    from orchestrator.sidecar.exchange import ServerLimits

    assert values.default("orchestrator.sidecar.exchange:ServerLimits.workers") == (
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


#: A measured figure typed into prose: a latency, a rate, a ratio or a percentage. Such a
#: figure comes from a results file through a marker (``<!-- result ... -->``) instead.
_TYPED_FIGURE = re.compile(
    r"\b\d[\d,.]*\s?(?:ms|rows/s|appends/s|appends a second|MiB/s|MB/s)\b"
    r"|\b\d+(?:\.\d+)?x\b|\bp(?:50|99) \d|\b\d+(?:\.\d+)?%"
)


def test_no_measured_figure_is_typed_into_prose() -> None:
    typed = []
    for page in sorted(DOCS.glob("*.md")):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # sample output
        text = re.sub(r"`[^`]*`", "", text)  # commands and sample lines
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
        typed += [f"{page.name}: {m.group(0)}" for m in _TYPED_FIGURE.finditer(text)]
    assert not typed, typed



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
    from orchestrator.sidecar.http import POST_TYPES
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
    """A Markdown table ends at a blank line: a line of prose right after a row renders as
    one more (bogus) row, and the strict build does not see it."""
    broken = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().splitlines()
        fenced = False
        for number, (line, after) in enumerate(itertools.pairwise(lines), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced or not line.lstrip().startswith("|"):
                continue
            if after.strip() and not after.lstrip().startswith("|"):
                broken.append(f"{path.relative_to(DOCS)}:{number + 1}: {after.strip()[:60]}")
    assert not broken, "prose right after a table row:\n" + "\n".join(broken)
