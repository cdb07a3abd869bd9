"""Loading releases from Python files, ``module:ATTR`` references and directories.

Import errors in a manifest are translated into :class:`~catalog.errors.ReleaseError` naming the
user's file and line."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

import structlog

from catalog.errors import CatalogError, ReleaseError
from catalog.release.manifest import IDENTIFIER_RE, RELEASE_ATTRIBUTE, Release
from catalog.release.version import Version

log = structlog.get_logger(__name__)


_MODULE_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def load_release(ref: str | Path) -> Release:
    """Load a release from ``path/to/file.py[:ATTR]`` or ``package.module:ATTR``.

    ``ATTR`` defaults to ``RELEASE``. Every failure (missing file or module, syntax error,
    exception while importing, missing attribute, attribute not a Release) is a
    :class:`ReleaseError` naming the file or module (and the line, when there is one).
    """
    text = str(ref)
    target, attribute = text, RELEASE_ATTRIBUTE
    head, sep, tail = text.rpartition(":")
    if sep and head and IDENTIFIER_RE.fullmatch(tail):
        target, attribute = head, tail
    if target.endswith(".py") or "/" in target or "\\" in target or Path(target).exists():
        path = Path(target)
        if not path.is_file():
            raise ReleaseError(f"release file not found: {path}", path=str(path))
        with _sibling_imports(path.resolve().parent):
            module = _import_file(path.resolve())
        return _release_attribute(module, attribute, str(path))
    if not _MODULE_REF_RE.fullmatch(target):
        raise ReleaseError(
            f"not a release reference: {text!r} (expected FILE.py[:ATTR] or package.module:ATTR)",
            ref=text,
        )
    try:
        with _translated_import_errors(target):
            module = importlib.import_module(target)
    except ReleaseError as exc:
        missing = exc.__cause__
        if (
            isinstance(missing, ModuleNotFoundError)
            and missing.name is not None
            and (target == missing.name or target.startswith(f"{missing.name}."))
        ):
            raise ReleaseError(f"release module not found: {target}", module=target) from None
        raise
    return _release_attribute(module, attribute, target)


def load_release_dir(directory: str | Path) -> list[Release]:
    """Load every ``*.py`` release in ``directory``, sorted by version.

    Files starting with ``_`` are helpers (shared schemas, transforms) and are not releases;
    every other file must define ``RELEASE``. Release files may import each other and their
    helpers by plain module name: the directory is importable while they load.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ReleaseError(f"release directory not found: {root}", path=str(root))
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise ReleaseError(f"no release files (*.py) in {root}", path=str(root))
    loaded: list[tuple[Release, Path]] = []
    with _sibling_imports(root.resolve()):
        for path in files:
            module = _import_file(path.resolve())
            loaded.append((_release_attribute(module, RELEASE_ATTRIBUTE, str(path)), path))
    by_version: dict[Version, Path] = {}
    for release, path in loaded:
        if release.version in by_version:
            raise ReleaseError(
                f"two releases at version {release.version}: {by_version[release.version].name} "
                f"and {path.name}",
                path=str(path),
                version=str(release.version),
                files=[str(by_version[release.version]), str(path)],
            )
        by_version[release.version] = path
    releases = sorted((r for r, _ in loaded), key=lambda r: r.version)
    log.debug("releases_loaded", directory=str(root), versions=[str(r.version) for r in releases])
    return releases


def find_release(releases: Iterable[Release], version: str | Version) -> Release:
    """The release at ``version``; a :class:`ReleaseError` when there is none."""
    wanted = Version.parse(version)
    available = list(releases)
    for release in available:
        if release.version == wanted:
            return release
    raise ReleaseError(
        f"no release {wanted} (available: {', '.join(str(r.version) for r in available)})",
        version=str(wanted),
        available=[str(r.version) for r in available],
    )


@contextlib.contextmanager
def _sibling_imports(directory: Path) -> Iterator[None]:
    """Make ``directory`` importable for the duration, without leaking its modules.

    Release directories reuse module names (``_schemas``, ``v1_0_0``): modules of the same names
    loaded from elsewhere are set aside and restored, and the modules this load adds from the
    directory are dropped afterwards, so the next directory gets its own. Not thread-safe (it
    edits ``sys.path`` and ``sys.modules``), like every import.
    """
    siblings = {p.stem for p in directory.glob("*.py")} | {
        p.name for p in directory.iterdir() if (p / "__init__.py").is_file()
    }
    shadowed = {
        name: module
        for name, module in sys.modules.items()
        if name.split(".")[0] in siblings and not _module_inside(module, directory)
    }
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    entry = str(directory)
    sys.path.insert(0, entry)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
        added = [
            n for n, m in sys.modules.items() if n not in before and _module_inside(m, directory)
        ]
        for name in added:
            del sys.modules[name]
        sys.modules.update(shadowed)


def _module_inside(module: ModuleType | None, directory: Path) -> bool:
    filename = getattr(module, "__file__", None)
    return isinstance(filename, str) and filename.startswith(f"{directory}{os.sep}")


def _import_file(path: Path) -> ModuleType:
    """Import one release file under its stem, so sibling imports of it share the module."""
    name = (
        path.stem if IDENTIFIER_RE.fullmatch(path.stem) else re.sub(r"\W", "_", f"_r_{path.stem}")
    )
    existing = sys.modules.get(name)
    if existing is not None and _module_inside(existing, path.parent):
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReleaseError(f"cannot import release file {path}", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _translated_import_errors(str(path)):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@contextlib.contextmanager
def _translated_import_errors(where: str) -> Iterator[None]:
    """Turn whatever importing a release raises into one ReleaseError naming the file and line."""
    try:
        yield
    except SyntaxError as exc:
        raise ReleaseError(
            f"syntax error in {exc.filename or where} line {exc.lineno}: {exc.msg}",
            path=exc.filename or where,
            line=exc.lineno,
        ) from exc
    # A release file is user code: whatever it raises while importing (a ReleaseError from an
    # invalid Builtin, a NameError, a missing helper module) is bad input, reported with the file
    # and line it came from instead of a traceback.
    except Exception as exc:
        if isinstance(exc, ReleaseError) and ("path" in exc.details or "module" in exc.details):
            raise
        culprit, line = _innermost_user_frame(exc, where)
        message = exc.message if isinstance(exc, CatalogError) else f"{type(exc).__name__}: {exc}"
        details = exc.details if isinstance(exc, CatalogError) else {}
        raise ReleaseError(
            f"{culprit}{f' line {line}' if line else ''}: {message}",
            **{**details, "path": culprit, "line": line, "error": type(exc).__name__},
        ) from exc


def _innermost_user_frame(exc: BaseException, where: str) -> tuple[str, int | None]:
    """The last traceback frame outside this package and the standard library: the user's line."""
    culprit, line = where, None
    package = str(Path(__file__).resolve().parents[1])  # the catalog package
    stdlib = os.path.dirname(os.__file__)
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith((package, stdlib, "<")) and "site-packages" not in filename:
            culprit, line = filename, tb.tb_lineno
        tb = tb.tb_next
    return culprit, line


def _release_attribute(module: ModuleType, attribute: str, where: str) -> Release:
    if not hasattr(module, attribute):
        raise ReleaseError(f"{where} has no attribute {attribute}", path=where, attribute=attribute)
    value = getattr(module, attribute)
    if not isinstance(value, Release):
        raise ReleaseError(
            f"{where}: {attribute} is a {type(value).__name__}, not a catalog.release.Release",
            path=where,
            attribute=attribute,
        )
    return value
