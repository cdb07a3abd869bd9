"""The ``catalog-upgrade`` command line: thin commands over testable modules.

Every command parses its arguments, calls one function of a module and renders the result.
``CatalogError`` (and only it) is translated to its documented exit code with a clear message;
anything else is a bug and exits 1 with the traceback.

Commands live in modules by subject (:mod:`.servers`, :mod:`.releases`, :mod:`.upgrade`,
:mod:`.pacing`, :mod:`.data`, :mod:`.fleet`, :mod:`.scenarios`); importing one registers its
commands on :func:`main`, which imports it when one of them runs
(:data:`~orchestrator.cli.root.COMMAND_MODULES`).
"""

from __future__ import annotations

from orchestrator.cli.root import main

__all__ = ["main"]
