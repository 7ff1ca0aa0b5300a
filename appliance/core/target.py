"""Which OVS database to talk to.

Resolution order, first match wins:

1. the ``--db`` option;
2. the ``HVNET_DB`` environment variable, then ``[target] db`` in ``hvnet.conf``
   (the front door passes both as one mapping, see :mod:`appliance.core.config`);
3. a running hvnet lab (its ``db.sock``), unless ``--no-lab`` turned lab
   discovery off (the hvnet-agent unit does: a hypervisor's agent polices the
   system OVS whatever else runs on the machine);
4. the system default ``unix:/var/run/openvswitch/db.sock``.

A target is one server or a clustered database's several, separated by
commas, each in a form the OVS IDL accepts (:data:`TARGET_FORMS`).  A ``tcp:``
target is accepted but carries a warning (see
:meth:`DbTarget.insecure_warning`): it is neither encrypted nor authenticated.

The chosen target is reported together with *why* it was chosen, so that an
"unreachable" error can say what was tried and what to do about it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.core.errors import UsageError

SYSTEM_DB = "unix:/var/run/openvswitch/db.sock"

DEFAULT_PORT = 6640  # OVSDB's IANA port: what ovs-vsctl and the IDL's C side assume for tcp:HOST and ssl:HOST

# One remote of a target: unix:PATH, or tcp:/ssl: HOST (a name, IPv4, or [IPv6]) with an optional port.
_REMOTE_RE = re.compile(
    r"^(?:unix:(?P<path>[^,]+)"
    r"|(?P<proto>tcp|ssl):(?P<host>\[[0-9a-fA-F:.]+(?:%[A-Za-z0-9_.\-]+)?\]|[A-Za-z0-9.\-]+)(?::(?P<port>[0-9]{1,5}))?)$"
)
TARGET_FORMS = (
    "unix:PATH, tcp:HOST[:PORT] or ssl:HOST[:PORT] (port 6640 by default, an IPv6 address in brackets: "
    "tcp:[fd00::1]:6640), or several of them separated by commas (a clustered database's servers)"
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

    @property
    def remotes(self) -> list[str]:
        """The servers this target names: one, or a clustered database's several (``a,b,c``)."""
        return remotes_of(self.remote)

    def insecure_warning(self) -> str | None:
        """What to tell the operator about a target with a ``tcp:`` server (None for unix: and ssl:)."""
        if not any(r.startswith("tcp:") for r in self.remotes):
            return None
        safe = ",".join("ssl:" + r[4:] if r.startswith("tcp:") else r for r in self.remotes)
        return (
            f"{self.remote} (from {self.source}) is plain TCP: OVSDB traffic is neither encrypted nor "
            f"authenticated, so anyone who can reach that port can read and change this switch; "
            f"use {safe} with --ssl-key, --ssl-cert and --ssl-ca (-p, -c, -C)"
        )


def validate_remote(remote: str, source: str) -> str:
    """``remote`` in the one spelling hvnet uses for it, or a usage error naming ``source``.

    Every form the OVS IDL accepts is taken: ``tcp:HOST`` and ``ssl:HOST``
    get OVSDB's port 6640 (Python's stream layer, unlike ovs-vsctl, has no
    default), a relative ``unix:`` path becomes absolute (a child hvnet or a
    journal record must name the same socket), and ``a,b,c`` is a cluster's
    servers, each checked.  One spelling per database also keeps the journal,
    which matches records by target, from seeing ``tcp:h`` and ``tcp:h:6640``
    as two switches.
    """
    parts = remote.split(",")
    out = []
    for part in parts:
        m = _REMOTE_RE.match(part)
        port = m.group("port") if m else None
        if not m or (port is not None and not 0 < int(port) < 65536):
            where = f" (in {remote!r})" if len(parts) > 1 else ""
            raise UsageError(f"{source}: invalid OVSDB target {part!r}{where}", hint=f"use {TARGET_FORMS}")
        if m.group("path") is not None:
            out.append("unix:" + os.path.abspath(m.group("path")))
        else:
            out.append(f"{m.group('proto')}:{m.group('host')}:{int(port) if port else DEFAULT_PORT}")
    return ",".join(out)


def remotes_of(remote: str) -> list[str]:
    """The servers of a (validated) target, in the order given: one, or a cluster's several."""
    return remote.split(",")


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
    (:mod:`appliance.core.labstate`); resolution itself never goes looking for a lab.
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
    if any(r.startswith("ssl:") for r in remotes_of(remote)):
        key = ssl_key or env.get("HVNET_SSL_KEY")
        cert = ssl_cert or env.get("HVNET_SSL_CERT")
        ca = ssl_ca or env.get("HVNET_SSL_CA")
        missing = [n for n, v in (("--ssl-key", key), ("--ssl-cert", cert), ("--ssl-ca", ca)) if not v]
        if missing:
            raise UsageError(
                f"ssl target {remote} needs {', '.join(missing)}",
                hint="pass the options (or OVS's -p, -c, -C) or set HVNET_SSL_KEY, HVNET_SSL_CERT and HVNET_SSL_CA",
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
    (:meth:`appliance.core.config.Layered.where`; this module is below the configuration and does not import it)."""
    where = getattr(env, "where", None)
    return str(where(name)) if callable(where) else name
