"""Release 0.10.0: the bootstrap. Every builtin at its first schema; nothing to migrate yet."""

from _schemas import BOOTSTRAP

from catalog.release import Release

RELEASE = Release(version="0.10.0", builtins=BOOTSTRAP, migrations=[])
