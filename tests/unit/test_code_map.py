"""The code map (docs/design.md, section 3) is written from the modules' docstrings."""

from __future__ import annotations

from pathlib import Path

from support.manual import docs_hook

ROOT = Path(__file__).resolve().parents[2]


codemap = docs_hook("codemap")


def test_every_module_says_what_it_is() -> None:
    missing = [str(p.relative_to(ROOT)) for p in codemap.modules() if not codemap.summary(p)]
    assert not missing, f"modules without a docstring: {missing}"


def test_the_map_names_every_module_and_only_those() -> None:
    lines = codemap.code_map()
    names = [line.strip().split()[0] for line in lines if line[: codemap.NAME_WIDTH].strip()]
    expected = []
    for path in codemap.modules():
        expected.append(path.parent.name + "/" if path.name == "__init__.py" else path.stem)
    assert sorted(n.rsplit("/", 2)[-2] + "/" if n.endswith("/") else n for n in names) == sorted(
        expected
    )


def test_the_design_holds_the_map_once_and_no_copy_is_kept_elsewhere() -> None:
    docs = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
    assert [name for name, text in docs.items() if "<!-- code map -->" in text] == ["design.md"]
    # The map's text sits between its markers only: no hand-typed copy elsewhere.
    outside = {name: text.replace(text[text.find("<!-- code map -->"):text.find(
        "<!-- /code map -->")], "") if name == "design.md" else text
               for name, text in docs.items()}  # fmt: skip
    assert not any("  consensus " in text for text in outside.values())
