"""The release history a scenario names versions from (a directory of release files)."""

from __future__ import annotations

from pathlib import Path

import attrs

from catalog.release import Release, Version, load_release


@attrs.define
class ReleaseIndex:
    """The release files of one directory by version, loaded once (loading imports them)."""

    directory: Path
    _by_version: dict[str, Path] | None = attrs.field(default=None, init=False)
    _releases: dict[Path, Release] = attrs.field(factory=dict, init=False)

    def versions(self) -> dict[str, Path]:
        if self._by_version is None:
            by_version: dict[str, Path] = {}
            for path in sorted(self.directory.glob("*.py")):
                if path.name.startswith("_"):
                    continue
                release = self.load(path)
                by_version[str(release.version)] = path
            self._by_version = by_version
        return self._by_version

    def load(self, path: Path) -> Release:
        path = path.resolve()
        if path not in self._releases:
            self._releases[path] = load_release(path)
        return self._releases[path]

    def sorted_versions(self) -> list[str]:
        return sorted(self.versions(), key=Version.parse)

    def releases(self) -> list[Release]:
        """Every release of the directory, oldest first."""
        return [self.load(self.versions()[v]) for v in self.sorted_versions()]
