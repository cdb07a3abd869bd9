"""ZooKeeper credentials and ACLs: a secured environment.

A process authenticates with a *digest* credential ``user:password`` given by ``--zk-auth
SOURCE`` (or ``CATALOG_UPGRADE_ZK_AUTH``), where SOURCE is ``file:PATH`` (the file's first line)
or ``env:NAME`` (an environment variable): never the secret itself on a command line.
``--zk-read-auth SOURCE`` (``CATALOG_UPGRADE_ZK_READ_AUTH``) names the read-only credential the
environment grants read access to (for ``status``).

With credentials, every znode the process creates in the environment gets the ACL
``digest:<user>:<hash>`` with all rights, plus ``digest:<reader>:<hash>`` with read when a
read-only credential is configured; nobody else may read or write. The shared parent
``/catalog-upgrade`` stays open (``catalog.consensus``). ``secure_tree`` puts that ACL on an
existing environment (``catalog-upgrade secure``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL, Permissions, make_digest_acl, make_digest_acl_credential

from catalog.consensus.errors import translated
from catalog.errors import BadInputError

AUTH_ENV: Final = "CATALOG_UPGRADE_ZK_AUTH"


READ_AUTH_ENV: Final = "CATALOG_UPGRADE_ZK_READ_AUTH"


@attrs.frozen
class Credential:
    """A digest credential; the password never appears in a repr or a log line."""

    user: str
    password: str = attrs.field(repr=False)

    @property
    def auth(self) -> str:
        return f"{self.user}:{self.password}"


def read_credential(source: str, option: str = "--zk-auth") -> Credential:
    """The credential ``source`` (``file:PATH`` or ``env:NAME``) names; BadInputError (exit 2)
    naming the option and the file or variable when it is malformed or unreadable."""
    kind, _, where = source.partition(":")
    if kind == "file" and where:
        try:
            text = Path(where).expanduser().read_text().splitlines()
        except OSError as exc:
            raise BadInputError(
                f"{option}: cannot read credential file {where}: {exc.strerror or exc}",
                option=option,
                path=where,
            ) from exc
        raw = text[0].strip() if text else ""
        origin = f"file {where}"
    elif kind == "env" and where:
        raw = os.environ.get(where, "").strip()
        origin = f"environment variable {where}"
    else:
        raise BadInputError(
            f"{option} takes file:PATH or env:NAME, not {source.split(':', 1)[0]!r}... "
            "(a credential is never passed on the command line)",
            option=option,
        )
    user, sep, password = raw.partition(":")
    if not sep or not user or not password:
        raise BadInputError(
            f"{option}: {origin} must hold USER:PASSWORD (digest credential)",
            option=option,
        )
    return Credential(user, password)


@attrs.frozen
class ZkAuth:
    """This process's credential and the read-only one the environment grants reads to."""

    credential: Credential
    reader: Credential | None = None

    @classmethod
    def from_sources(cls, auth: str | None, read_auth: str | None = None) -> ZkAuth | None:
        """From option values (None: not secured); a read-only source alone is refused."""
        if not auth:
            if read_auth:
                raise BadInputError("--zk-read-auth needs --zk-auth (the environment's owner)")
            return None
        reader = read_credential(read_auth, "--zk-read-auth") if read_auth else None
        return cls(read_credential(auth), reader)

    @classmethod
    def from_environment(cls) -> ZkAuth | None:
        """From ``CATALOG_UPGRADE_ZK_AUTH`` and ``CATALOG_UPGRADE_ZK_READ_AUTH``."""
        return cls.from_sources(os.environ.get(AUTH_ENV), os.environ.get(READ_AUTH_ENV))

    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", self.credential.auth)]

    def acl(self) -> list[ACL]:
        """The ACL of every node of a secured environment."""
        owner = self.credential
        acl = [make_digest_acl(owner.user, owner.password, all=True)]
        if self.reader is not None and self.reader.user != owner.user:
            acl.append(make_digest_acl(self.reader.user, self.reader.password, read=True))
        return acl


def secure_tree(client: KazooClient, root: str, acl: list[ACL]) -> int:
    """Set ``acl`` on ``root`` and every node below it (children first listed, then set, so a
    node is never locked before its children were reached); the number of nodes secured."""
    count = 0
    pending = [root]
    while pending:
        path = pending.pop()
        with translated(f"securing {path}", path):
            try:
                children = client.get_children(path)
                client.set_acls(path, acl)
            except NoNodeError:  # gone meanwhile (an ephemeral node)
                continue
        count += 1
        pending.extend(f"{path}/{child}" for child in children)
    return count


def may_write(client: KazooClient, path: str) -> bool:
    """Whether ``client``'s credentials may write ``path``, from its ACL (read, not tried: a
    command that would wait before writing learns at once that it never could). An ACL of a
    scheme this cannot judge (not ``world`` or ``digest``) counts as writable: the write then
    says."""
    try:
        acls, _stat = client.get_acls(path)
    except NoAuthError:
        return False
    except NoNodeError:
        return True  # nothing there yet: its creation says
    mine = {
        make_digest_acl_credential(*credential.split(":", 1))
        for scheme, credential in getattr(client, "auth_data", ())
        if scheme == "digest" and ":" in credential
    }
    for acl in acls:
        if not acl.perms & Permissions.WRITE:
            continue
        scheme, name = acl.id.scheme, acl.id.id
        if scheme == "world" or scheme not in ("digest",) or name in mine:
            return True
    return False
