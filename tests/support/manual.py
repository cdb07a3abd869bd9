"""The manual's modules (``docs/hooks``) for tests, loaded as MkDocs loads a hook: from their
files, through ``docs/hooks/generated.py``, which loads the others."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


@functools.cache
def generated() -> ModuleType:
    """``docs/hooks/generated.py``, which writes the pages' generated text."""
    spec = importlib.util.spec_from_file_location("generated", HOOKS / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs_hook(name: str) -> ModuleType:
    """The module ``docs/hooks/<name>.py``."""
    hook: ModuleType = generated().hook(name)
    return hook
