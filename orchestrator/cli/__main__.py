"""``python -m orchestrator.cli``: the ``catalog-upgrade`` command."""

from orchestrator.cli import main

main()
