"""Which OVS database to talk to.

Resolution order, first match wins:

1. the ``--db`` option;
2. the ``HVNET_DB`` environment variable, then ``[target] db`` in ``hvnet.conf``
   (the front door passes both as one mapping, see :mod:`appliance.config`);
3. a running hvnet lab (its ``db.sock``), unless ``--no-lab`` turned lab
   discovery off (the hvnet-agent unit does: a hypervisor's agent polices the
   system OVS whatever else runs on the machine);
4. the system default ``unix:/var/run/openvswitch/db.sock``.

A ``tcp:`` target is accepted but carries a warning (see
:meth:`DbTarget.insecure_warning`): it is neither encrypted nor authenticated.

The chosen target is reported together with *why* it was chosen, so that an
"unreachable" error can say what was tried and what to do about it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import UsageError

SYSTEM_DB = "unix:/var/run/openvswitch/db.sock"

_TARGET_RE = re.compile(
    r"^(?:unix:(?P<path>/.+)"
    r"|(?P<proto>tcp|ssl):(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):(?P<port>[0-9]{1,5}))$"
)


@dataclass(frozen=True)
class SslOptions:
    """Key, certificate and CA certificate for ``ssl:`` targets."""

    private_key: str
    certificate: str
    ca_cert: str


@dataclass(frozen=True)
class DbTarget:
    """A resolved OVSDB remote and the reason it was chosen."""

    remote: str
    source: str  # "--db", "HVNET_DB", "/etc/hvnet/hvnet.conf:3", "lab", "system default"
    ssl: SslOptions | None = None
    # What the operator knows the database as, when ``remote`` is only a means to it: a remote
    # host's socket ("/var/run/openvswitch/db.sock on xs01") reached through a forwarded one.
    where: str | None = None

    def describe(self) -> str:
        return f"{self.where or self.remote} (from {self.source})"

    def insecure_warning(self) -> str | None:
        """What to tell the operator about a ``tcp:`` target (None for unix: and ssl:)."""
        if not self.remote.startswith("tcp:"):
            return None
        return (
            f"warning: {self.remote} (from {self.source}) is plain TCP: OVSDB traffic is neither encrypted nor "
            f"authenticated, so anyone who can reach that port can read and change this switch; "
            f"use ssl:{self.remote[4:]} with --ssl-key, --ssl-cert and --ssl-ca"
        )


def validate_remote(remote: str, source: str) -> str:
    """Check that ``remote`` is a ``unix:``, ``tcp:`` or ``ssl:`` target."""
    m = _TARGET_RE.match(remote)
    if not m or (m.group("port") and not 0 < int(m.group("port")) < 65536):
        raise UsageError(
            f"{source}: invalid OVSDB target {remote!r}",
            hint="use unix:/path/to/db.sock, tcp:HOST:PORT or ssl:HOST:PORT",
        )
    return remote


def resolve(
    db: str | None = None,
    *,
    ssl_key: str | None = None,
    ssl_cert: str | None = None,
    ssl_ca: str | None = None,
    environ: Mapping[str, str],
    lab_db: str | None = None,
) -> DbTarget:
    """Resolve the database target (see the module docstring for the order).

    ``lab_db`` is the running lab's remote, which the front door looks up
    (:mod:`appliance.labstate`); resolution itself never goes looking for a lab.
    """
    env = environ
    if db:
        remote, source = validate_remote(db, "--db"), "--db"
    elif env.get("HVNET_DB"):
        source = _where(env, "HVNET_DB")
        remote = validate_remote(env["HVNET_DB"], source)
    elif lab_db:
        remote, source = lab_db, "lab"
    else:
        remote, source = SYSTEM_DB, "system default"
    ssl = None
    if remote.startswith("ssl:"):
        key = ssl_key or env.get("HVNET_SSL_KEY")
        cert = ssl_cert or env.get("HVNET_SSL_CERT")
        ca = ssl_ca or env.get("HVNET_SSL_CA")
        missing = [n for n, v in (("--ssl-key", key), ("--ssl-cert", cert), ("--ssl-ca", ca)) if not v]
        if missing:
            raise UsageError(
                f"ssl target {remote} needs {', '.join(missing)}",
                hint="pass the options or set HVNET_SSL_KEY, HVNET_SSL_CERT and HVNET_SSL_CA",
            )
        for label, path in (
            ("--ssl-key" if ssl_key else _where(env, "HVNET_SSL_KEY"), key),
            ("--ssl-cert" if ssl_cert else _where(env, "HVNET_SSL_CERT"), cert),
            ("--ssl-ca" if ssl_ca else _where(env, "HVNET_SSL_CA"), ca),
        ):
            if not os.path.isfile(str(path)):
                raise UsageError(f"{label}: no such file: {path}")
        ssl = SslOptions(private_key=str(key), certificate=str(cert), ca_cert=str(ca))
    return DbTarget(remote=remote, source=source, ssl=ssl)


def _where(env: Mapping[str, str], name: str) -> str:
    """What a value of ``env`` is called in messages: the variable, or the configuration file's line
    (:meth:`appliance.config.Layered.where`; this module is below the configuration and does not import it)."""
    where = getattr(env, "where", None)
    return str(where(name)) if callable(where) else name
