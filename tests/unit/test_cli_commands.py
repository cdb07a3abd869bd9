"""The command group: each command found in the module named for it, and imported only when it
runs (``status --help`` or ``promote --help`` parses without the sidecar, the pipeline or Arrow)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.cli.root import COMMAND_MODULES

#: What a light command must not import.
HEAVY = ("pyarrow", "numpy", "orchestrator.sidecar", "catalog.pipeline", "catalog.shard")


def test_every_command_is_registered_by_the_module_the_group_names() -> None:
    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"orchestrator.cli.{module}")
    assert set(main.commands) == set(COMMAND_MODULES)
    for name, command in main.commands.items():
        defined_in = command.callback.__module__ if command.callback else None
        assert defined_in == f"orchestrator.cli.{COMMAND_MODULES[name]}", name


def test_the_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    listed = {
        line.split()[0]
        for line in result.output.split("Commands:", 1)[1].splitlines()
        if line.startswith("  ") and line.split()
    }
    assert listed == set(COMMAND_MODULES)


def test_an_unknown_command_is_a_usage_error_naming_it() -> None:
    result = CliRunner().invoke(main, ["promte"])
    assert result.exit_code == 2
    assert "No such command 'promte'" in result.output


def test_a_light_command_imports_neither_arrow_nor_the_sidecar() -> None:
    """In a fresh interpreter (this one has imported everything): ``promote --help`` and
    ``status --help`` parse their options without importing what only other commands need."""
    script = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from orchestrator.cli import main\n"
        "codes = [CliRunner().invoke(main, [c, '--help']).exit_code for c in sys.argv[1:]]\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "promote", "status", "throttle", "history"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found == {"codes": [0, 0, 0, 0], "heavy": []}, done.stderr[-2000:]
