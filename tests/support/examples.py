"""The manual's code blocks, and a reader who runs them as they are written.

Every fenced block of ``docs/*.md`` and the README in a language a reader can run (``python``,
``sh``, ``console``) is run by ``tests/integration/test_examples.py``, in one of the
:data:`STORIES` (blocks that build on each other run in one story, in order), or says on the
line before it why it is not::

    <!-- example not run: the reason -->
    <!-- example quoted from: PATH -->   (each of its lines is in PATH: the test reads both)

The annotations are HTML comments: hidden on a code host and in the site.
``tests/unit/test_manual.py`` checks that the stories and the pages agree.

A :class:`Reader` runs a shell block a command at a time, in a directory of its own that sees
the repository's ``scenarios/``, with the product's ``catalog-upgrade`` first on its ``PATH``.
The pages name fixed ports (ZooKeeper's 2181, sidecars from 8081); a reader maps each to a free
one, in the commands and in Python alike, so stories run side by side. A command sent to the
background (``... &``) is waited for as a reader would before typing the next line: until its
port accepts (ZooKeeper) or its ``/readyz`` answers 200 (a sidecar).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs

from orchestrator.testing.zkserver import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
#: The languages of blocks a reader can run.
RUNNABLE = ("python", "sh", "console")
#: The ports the pages name, each mapped to a free one by a :class:`Reader`.
DOCUMENTED_PORTS = (2181, 8081, 8082, 8083)

NOT_RUN = "not run: "
QUOTED = "quoted from: "
_FENCE = re.compile(r"^```(?P<language>\S*)\n(?P<text>.*?)^```$", re.S | re.M)
_ANNOTATION = re.compile(r"<!-- example (?P<note>[^>]*?) -->\n\Z")
_BACKGROUND = re.compile(r"(?s)(?P<command>.*?[^&])&\s*(#.*)?")

#: The stories: each runs its blocks in order, each named by its page and the start of a line of
#: it that no other block of the page has.
STORIES: dict[str, tuple[tuple[str, str], ...]] = {
    "readme": (
        ("README.md", "catalog-upgrade zookeeper &"),
        ("README.md", "from catalog_client import SidecarClient"),
    ),
    "rollback": (
        ("docs/getting-started.md", "catalog-upgrade zookeeper &"),
        ("docs/operating.md", "catalog-upgrade throttle --deploy-generation 2"),
        ("docs/concepts.md", "catalog-upgrade sidecar --release scenarios/releases/v0_10_0.py"),
    ),
    "rollback_in_an_environment": (
        ("docs/operating.md", "catalog-upgrade sidecar --env ops2"),
    ),
    "data_plane": (
        ("docs/data-plane.md", "import io, urllib.request"),
        ("docs/data-plane.md", "import urllib.request"),
        ("docs/data-plane.md", "import polars as pl"),
        ("docs/data-plane.md", "import duckdb"),
    ),
    "client": (("docs/http-api.md", "import pyarrow as pa"),),
    "releases": (
        ("docs/releases.md", "RELEASE = Release("),
        ("docs/releases.md", "catalog-upgrade plan --releases scenarios/releases"),
        ("docs/releases.md", "from catalog.schema import renamed"),
        ("docs/releases.md", 'Migration("26.34.0"'),
        ("docs/concepts.md", "$ catalog-upgrade plan --releases scenarios/releases"),
    ),
}  # fmt: skip


@attrs.frozen
class Block:
    """One fenced code block of a page."""

    page: str  # relative to the repository
    line: int  # of its opening fence
    language: str
    text: str
    note: str | None  # its annotation: ``not run: ...`` or ``quoted from: ...``

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    @property
    def runnable(self) -> bool:
        return self.language in RUNNABLE

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.first!r})"


def blocks() -> list[Block]:
    """Every fenced block of the manual and the README."""
    found = []
    for path in PAGES:
        page = path.read_text()
        for match in _FENCE.finditer(page):
            before = page[: match.start()]
            annotation = _ANNOTATION.search(before)
            found.append(
                Block(
                    page=str(path.relative_to(ROOT)),
                    line=before.count("\n") + 1,
                    language=match.group("language"),
                    text=match.group("text"),
                    note=annotation.group("note") if annotation else None,
                )
            )
    return found


def matching(page: str, line: str, among: list[Block] | None = None) -> list[Block]:
    """The blocks of ``page`` with a line that starts with ``line``."""
    return [
        block for block in among or blocks()
        if block.page == page and any(ours.startswith(line) for ours in block.text.splitlines())
    ]  # fmt: skip


def story(name: str) -> list[Block]:
    """The blocks of story ``name``, in order."""
    found = []
    for page, line in STORIES[name]:
        (block,) = matching(page, line)
        found.append(block)
    return found


def commands(block: Block) -> list[str]:
    """The commands of a shell block, as a reader types them: continued lines joined; of a
    ``console`` block, only the lines after a ``$`` prompt (the others are its output)."""
    found: list[str] = []
    continued = False
    for line in block.text.splitlines():
        if block.language == "console" and not continued:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if continued:
            found[-1] += " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            found.append(line.strip())
        continued = bool(found) and found[-1].endswith("\\")
        if continued:
            found[-1] = found[-1][:-1].rstrip()
    return found


@attrs.define
class Reader:
    """A reader at a terminal, in ``work``: runs commands, keeps what it sent to the background
    (stopped by :meth:`close`), and maps the documented ports to free ones."""

    work: Path
    ports: dict[int, int] = attrs.field(factory=lambda: {p: free_port() for p in DOCUMENTED_PORTS})
    environment: dict[str, str] = attrs.field(factory=dict)
    background: list[tuple[str, subprocess.Popen[bytes], Path]] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        if not (self.work / "scenarios").exists():
            (self.work / "scenarios").symlink_to(ROOT / "scenarios")

    def mapped(self, text: str) -> str:
        """``text`` with every documented port replaced by this reader's."""
        for documented, free in self.ports.items():
            text = re.sub(rf":{documented}\b", f":{free}", text)
        zookeeper = f"catalog-upgrade zookeeper --port {self.ports[2181]}"
        return re.sub(r"\bcatalog-upgrade zookeeper\b", zookeeper, text)

    def _environment(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "CATALOG_UPGRADE_ZK": f"127.0.0.1:{self.ports[2181]}",
            "COLUMNS": "200",
            **self.environment,
        }

    def run_block(self, block: Block) -> list[str]:
        """Run every command of ``block`` in turn; the output of each (background ones: "")."""
        assert block.language in ("sh", "console"), block
        return [self.run(command) for command in commands(block)]

    def run(self, command: str) -> str:
        """Run one command as written (ports mapped); its standard output. A command that
        fails, or a JSON answer naming an error (curl exits 0 on any status), fails the
        example, with what the background processes logged."""
        command = self.mapped(command)
        background = _BACKGROUND.fullmatch(command)
        if background:
            self._start(background.group("command").strip())
            return ""
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.work, env=self._environment(),
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        said = f"$ {command}\n{done.stdout}\n{done.stderr}"
        assert done.returncode == 0, f"exit {done.returncode}\n{said}\n{self.logs()}"
        assert not _error_answer(done.stdout), f"{said}\n{self.logs()}"
        return done.stdout

    def _start(self, command: str) -> None:
        log = self.work / f"background-{len(self.background)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", f"exec {command}"], cwd=self.work, env=self._environment(),
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.background.append((command, process, log))
        arguments = shlex.split(command)
        if arguments[:2] == ["catalog-upgrade", "zookeeper"]:
            self._wait(process, log, lambda: _accepts(self.ports[2181]))
        elif "--http" in arguments:
            port = int(arguments[arguments.index("--http") + 1].rpartition(":")[2])
            self._wait(process, log, lambda: _ready(port))

    def _wait(self, process: subprocess.Popen[bytes], log: Path, done: object) -> None:
        deadline = time.monotonic() + 120
        while not done():  # type: ignore[operator]
            assert process.poll() is None, f"exited {process.returncode}\n{log.read_text()}"
            assert time.monotonic() < deadline, f"not ready in 120 s\n{log.read_text()}"
            time.sleep(0.1)

    def logs(self, lines: int = 30) -> str:
        """The tail of what each background command logged."""
        tails = []
        for command, _, log in self.background:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {command}\n" + "\n".join(text))
        return "\n".join(tails)

    def close(self) -> None:
        """Stop what is still running in the background."""
        for _, process, _ in reversed(self.background):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _error_answer(output: str) -> bool:
    """Whether ``output`` is a JSON document that names an error (an HTTP refusal)."""
    try:
        document = json.loads(output)
    except ValueError:
        return False
    return isinstance(document, dict) and "error" in document and document["error"] is not None
