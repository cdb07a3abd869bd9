"""The CLI's reference and its environment variables, written from the commands.

``<!-- environment variables -->`` holds every ``CATALOG_UPGRADE_*`` (and other) variable the
product reads: those of command options, with the options and commands they set, and those the
code reads itself (found in the sources, with the module that reads each).
``<!-- cli reference -->`` holds each command's options, with their defaults and variables,
as ``--help`` shows them. Both come from the click commands, so they cannot drift.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
_READ_IN_CODE = re.compile(r'^[A-Z_]+ = "(CATALOG_UPGRADE_[A-Z_]+)"', re.MULTILINE)


def commands() -> list[tuple[str, click.Command]]:
    """Every command, by its full name (``scenario run``), loaded as ``--help`` loads it."""
    from orchestrator.cli.root import main

    context = click.Context(main, info_name="catalog-upgrade")
    out: list[tuple[str, click.Command]] = []

    def walk(group: click.Group, prefix: str) -> None:
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if command is None:
                continue
            out.append((f"{prefix}{name}", command))
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")

    walk(main, "")
    return out


def variables() -> str:
    from orchestrator.cli.root import main

    options: dict[str, set[str]] = defaultdict(set)
    used_by: dict[str, set[str]] = defaultdict(set)
    for name, command in [("(every command)", main), *commands()]:
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                for variable in _names(param.envvar):
                    options[variable].add(param.opts[0])
                    used_by[variable].add(name)
    lines = ["| variable | sets |", "| --- | --- |"]
    for variable in sorted(options):
        which = ", ".join(f"`{o}`" for o in sorted(options[variable]))
        lines.append(f"| `{variable}` | {which} ({_count(used_by[variable])}) |")
    for variable, module in sorted(read_in_code().items()):
        if variable not in options:
            lines.append(f"| `{variable}` | read by `{module}` |")
    return "\n".join(lines)


def read_in_code() -> dict[str, str]:
    """Variables the code reads itself: a module constant named for one, by variable."""
    found: dict[str, str] = {}
    for package in ("catalog", "orchestrator"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for variable in _READ_IN_CODE.findall(path.read_text()):
                found.setdefault(variable, str(path.relative_to(ROOT)))
    return found


def reference() -> str:
    sections = []
    for name, command in commands():
        if command.hidden:
            continue
        summary = (command.help or "").split("\n\n")[0].replace("\n", " ").strip()
        lines = [f"### `catalog-upgrade {name}`", "", summary, ""]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                lines.append(f"- {_option(param)}")
        sections.append("\n".join(lines).rstrip())
    return "\n\n".join(sections)


def _option(param: click.Option) -> str:
    names = " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    text = " ".join((param.help or "").split())
    notes = []
    default = param.default
    unset = default is None or type(default).__name__ == "Sentinel" or callable(default)
    if not unset and param.show_default is not False and default not in ((), False, ""):
        notes.append(f"default `{default}`")
    if param.envvar:
        notes.append(", ".join(f"`{v}`" for v in _names(param.envvar)))
    if param.required:
        notes.append("required")
    return f"{names}: {text}" + (f" ({'; '.join(notes)})" if notes else "")


def _names(envvar: str | Sequence[str]) -> list[str]:
    return [envvar] if isinstance(envvar, str) else list(envvar)


def _count(names: set[str]) -> str:
    if "(every command)" in names:
        return "every command"
    return f"{len(names)} command{'s' if len(names) > 1 else ''}"
