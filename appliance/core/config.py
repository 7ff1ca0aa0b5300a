"""hvnet's settings: one configuration file under the environment and the flags.

Every setting has a key in ``/etc/hvnet/hvnet.conf`` (``$HVNET_CONFIG`` names
another file) and an ``HVNET_*`` environment variable of the same meaning.
The first of these wins:

1. a command-line flag (``--db``, ``--host``, ``--ssl-*``, ``--libvirt``, a verb's own);
2. the environment variable (an empty one counts as unset, as it always has);
3. the configuration file;
4. the built-in default.

The file is INI: ``[section]`` headers, ``key = value`` lines, ``#`` or ``;``
comment lines; the subset Python's :mod:`configparser` also reads, parsed here
by a few lines of our own so that every value keeps its line (for
``hvnet config show`` and for errors) and the rules stay strict: an unknown
section or key, a key given twice or a value that is not allowed is an error
naming ``file:line``, the key and what is allowed, before anything is done.
INI rather than TOML: EL9's Python 3.9 has no ``tomllib`` (a TOML reader would
be one more vendored library), and INI is what the neighbouring files in
``/etc`` (dnf.conf, sssd.conf) are written in.

Readers of the settings take a mapping of ``HVNET_*`` names, as they always
have; :func:`environ` gives them the process's environment with the file's
values beneath it (:class:`Layered`), so a variable overrides the file and a
flag, checked first by its reader, overrides both.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from appliance.core import trusted
from appliance.core.errors import ConfigError, Problem, UsageError
from appliance.core.render import si

CONFIG_VARIABLE = "HVNET_CONFIG"
DEFAULT_FILE = Path("/etc/hvnet/hvnet.conf")
DEFAULT_EXPORTER_LISTEN = "127.0.0.1:9477"


# -- values ----------------------------------------------------------------------------


def _absolute_path(text: str) -> str:
    if not text.startswith("/") or "\0" in text:
        raise ValueError("an absolute path (starting with /)")
    return text


def _target(text: str) -> str:
    from appliance.core.target import validate_remote

    try:
        return validate_remote(text, "db")
    except UsageError as exc:  # what --db takes, as the target module says it
        raise ValueError(exc.hint or "an OVSDB target") from None


def _ssh_host(text: str) -> str:
    from appliance.core.ssh import SshTarget

    try:
        SshTarget.parse(text, "host")
    except UsageError:
        raise ValueError("an inventory name or [USER@]NAME[:PORT]") from None
    return text


def _libvirt_uri(text: str) -> str:
    if text.lower() != "none" and not re.match(r"^[a-z][a-z0-9+.-]*:", text):
        raise ValueError("a libvirt URI (qemu:///system, qemu+ssh://host/system) or none")
    return text


def _http_url(text: str) -> str:
    from appliance.core.validate import xapi_url

    return xapi_url(text)


def _fingerprint(text: str) -> str:
    from appliance.core.validate import sha256_fingerprint

    sha256_fingerprint(text)
    return text


def _seconds_up_to_300(text: str) -> str:
    try:
        ok = 0 < float(text) <= 300
    except ValueError:
        ok = False
    if not ok:
        raise ValueError("a number of seconds greater than 0 and at most 300")
    return text


def _free_floor(text: str) -> str:
    parse_floor(text)
    return text


def _seconds_up_to_60(text: str) -> str:
    try:
        ok = 0 < float(text) <= 60
    except ValueError:
        ok = False
    if not ok:
        raise ValueError("a number of seconds greater than 0 and at most 60")
    return text


GUEST_SOURCES = ("lab", "probes", "vms")  # where suites and isolation checks find their endpoints (--guests)
GUEST_SOURCES_TEXT = ", ".join(GUEST_SOURCES[:-1]) + " or " + GUEST_SOURCES[-1]  # for messages


def _guest_source(text: str) -> str:
    if text not in GUEST_SOURCES:
        raise ValueError(GUEST_SOURCES_TEXT)
    return text


def _policing(text: str) -> str:
    if text not in ("auto", "tc", "meter"):
        raise ValueError("auto, tc or meter")
    return text


FLOOR_PERCENT_RANGE = (0, 90)


@dataclass(frozen=True)
class Floor:
    """The free space a capture must leave: a share of the file system, or a size in bytes."""

    text: str  # as given ("10%", "2048MB")
    percent: float | None = None
    size: int | None = None  # bytes

    def bytes_of(self, total: int) -> int:
        """The floor in bytes on a file system of ``total`` bytes."""
        if self.percent is not None:
            return int(total * self.percent / 100)
        return int(self.size or 0)

    def describe(self, total: int) -> str:
        if self.percent is not None:
            return f"{si(self.bytes_of(total), 'B')} ({self.text} of {si(total, 'B')})"
        return si(self.bytes_of(total), "B")


def parse_floor(text: str) -> Floor:
    """``10%``, ``500MB`` or ``2GB`` (decimal units, as tcpdump's -C) -> a :class:`Floor`; ValueError saying
    what is allowed."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(%|MB|GB)\s*", text, re.I)
    low, high = FLOOR_PERCENT_RANGE
    allowed = f"a share of the file system ({low}% to {high}%) or a size (500MB, 2GB)"
    if not m:
        raise ValueError(allowed)
    value, unit = float(m.group(1)), m.group(2).upper()
    if unit == "%":
        if not FLOOR_PERCENT_RANGE[0] <= value <= FLOOR_PERCENT_RANGE[1]:
            raise ValueError(allowed)
        return Floor(text.strip(), percent=value)
    return Floor(text.strip(), size=int(value * (1e6 if unit == "MB" else 1e9)))


@dataclass(frozen=True)
class Listen:
    """An address and port to listen on, and where the setting came from."""

    host: str
    port: int
    source: str

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` or ``[IPv6]:PORT`` -> (address, port); ValueError saying what is allowed."""
    m = re.match(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>[0-9]{1,5})$", text)
    if not m or not 0 < int(m.group("port")) < 65536:
        raise ValueError("ADDRESS:PORT or [IPv6]:PORT, port 1 to 65535 (e.g. 127.0.0.1:9477)")
    return m.group("v6") or m.group("host"), int(m.group("port"))


def _listen(text: str) -> str:
    parse_listen(text)
    return text


# -- the settings ------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: its file key, its variable, its flag (if global), its default and its check."""

    section: str
    key: str
    env: str
    check: Callable[[str], str]
    default: Optional[str] = None  # None: unset unless given (what that means is in ``help``)
    flag: Optional[str] = None
    help: str = ""
    also_env: tuple[str, ...] = ()  # other variables that outrank the file for this setting

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


_S = Setting
SETTINGS: tuple[Setting, ...] = (
    _S("target", "db", "HVNET_DB", _target, None, "--db",
       "OVSDB target; unset: a running hvnet lab, else unix:/var/run/openvswitch/db.sock"),
    _S("target", "host", "HVNET_HOST", _ssh_host, None, "--host",
       "a remote hypervisor over SSH (inventory name or [USER@]NAME[:PORT]); unset: this machine"),
    _S("target", "ssl_key", "HVNET_SSL_KEY", _absolute_path, None, "--ssl-key", "private key for ssl: targets"),
    _S("target", "ssl_cert", "HVNET_SSL_CERT", _absolute_path, None, "--ssl-cert", "certificate for ssl: targets"),
    _S("target", "ssl_ca", "HVNET_SSL_CA", _absolute_path, None, "--ssl-ca", "CA certificate for ssl: targets"),
    _S("data", "state_dir", "HVNET_STATE_DIR", _absolute_path, "/var/lib/hvnet", None,
       "rollback records, the pending --no-commit apply"),
    _S("data", "audit_log", "HVNET_AUDIT_LOG", _absolute_path, "/var/log/hvnet/audit.jsonl", None,
       "one JSON line per change"),
    _S("data", "runs_dir", "HVNET_RUNS_DIR", _absolute_path, "/var/lib/hvnet/runs", None, "suite runs"),
    _S("data", "pcap_dir", "HVNET_PCAP_DIR", _absolute_path, "/var/lib/hvnet/captures", None,
       "'hvnet capture' captures"),
    _S("data", "capture_free_floor", "HVNET_CAPTURE_FREE_FLOOR", _free_floor, "10%", None,
       "free space a capture leaves on its file system: N% of it or a size (500MB, 2GB); --free-floor"),
    _S("data", "isolation_dir", "HVNET_CAPTURES_DIR", _absolute_path, "/var/lib/hvnet/isolation", None,
       "isolation checks' pcaps"),
    _S("names", "libvirt_uri", "HVNET_LIBVIRT_URI", _libvirt_uri, "qemu:///system", "--libvirt",
       "libvirt for VM names, or none", ("LIBVIRT_DEFAULT_URI",)),
    _S("names", "xapi_url", "HVNET_XAPI_URL", _http_url, None, None, "XenServer pool master for VM names"),
    _S("names", "xapi_credentials", "HVNET_XAPI_CREDENTIALS", _absolute_path, None, None,
       "a user:password file (mode 0600)"),
    _S("names", "xapi_ca", "HVNET_XAPI_CA", _absolute_path, None, None,
       "CA certificate(s) that sign XAPI's https certificate; unset: the system's store"),
    _S("names", "xapi_fingerprint", "HVNET_XAPI_FINGERPRINT", _fingerprint, None, None,
       "SHA-256 fingerprint of XAPI's https certificate (a self-signed one): only that certificate is accepted"),
    _S("names", "xapi_timeout", "HVNET_XAPI_TIMEOUT", _seconds_up_to_300, "3", None, "seconds per XAPI call"),
    _S("remote", "inventory", "HVNET_INVENTORY", _absolute_path, "/etc/hvnet/hosts.yaml", None,
       "the hypervisors hvnet reaches over SSH (a running lab's own when unset)"),
    _S("remote", "ssh_config", "HVNET_SSH_CONFIG", _absolute_path, None, None, "ssh -F FILE; unset: ~/.ssh/config"),
    _S("remote", "ssh_known_hosts", "HVNET_SSH_KNOWN_HOSTS", _absolute_path, None, None,
       "known_hosts file; unset: ssh's own"),
    _S("remote", "ssh_identity", "HVNET_SSH_IDENTITY", _absolute_path, None, None, "ssh -i FILE; unset: ssh's own"),
    _S("remote", "ovs_rundir", "HVNET_REMOTE_OVS_RUNDIR", _absolute_path, "/var/run/openvswitch", None,
       "where remote hosts' OVS sockets are (an inventory entry's ovs_rundir wins)"),
    _S("agent", "policy", "HVNET_POLICY", _absolute_path, "/etc/hvnet/policy.yaml", None,
       "the policy the agent enforces; plan/apply/verify's default file"),
    _S("agent", "policing", "HVNET_AGENT_POLICING", _policing, None, None,
       "force the agent's ingress policing mechanism (--policing); unset: each rule's own"),
    _S("exporter", "listen", "HVNET_EXPORTER_LISTEN", _listen, DEFAULT_EXPORTER_LISTEN, None,
       "where 'hvnet exporter' serves /metrics"),
    _S("exporter", "scrape_timeout", "HVNET_EXPORTER_SCRAPE_TIMEOUT", _seconds_up_to_60, "5", None,
       "seconds within which every scrape answers (--scrape-timeout)"),
    _S("exporter", "tls_cert", "HVNET_EXPORTER_TLS_CERT", _absolute_path, None, None,
       "serve HTTPS with this PEM certificate (--tls-cert); unset: plain HTTP"),
    _S("exporter", "tls_key", "HVNET_EXPORTER_TLS_KEY", _absolute_path, None, None,
       "the certificate's PEM private key (--tls-key)"),
    _S("exporter", "client_ca", "HVNET_EXPORTER_CLIENT_CA", _absolute_path, None, None,
       "serve only clients with a certificate this CA signed (--client-ca)"),
    _S("measure", "guests", "HVNET_GUESTS", _guest_source, None, "--guests",
       "where suites and isolation checks find their endpoints: lab, probes or vms; unset: the probes the file "
       "names, the VMs of a VM inventory given by --vms or vms, else the lab when no --host/--db/--hosts/--pool "
       "names a real target"),
    _S("measure", "vms", "HVNET_VMS", _absolute_path, None, "--vms",
       "the VM inventory: real VMs a suite's client and server name, reached over SSH or their guest agent "
       "(with --guests vms unset: /etc/hvnet/vms.yaml)"),
    _S("lab", "dir", "HVNET_LAB_DIR", _absolute_path, "/run/hvnet/lab", None, "the built-in lab's run directory"),
    _S("lab", "image_cache", "HVNET_IMAGE_CACHE", _absolute_path, "/var/cache/hvnet/image", None,
       "the lab's QEMU guest image cache"),
)  # fmt: skip
BY_NAME = {s.name: s for s in SETTINGS}
BY_ENV = {s.env: s for s in SETTINGS}
SECTIONS = tuple(dict.fromkeys(s.section for s in SETTINGS))

# Read through here as well, but never from the file: a fault drill's step, a test's accelerator choice.
ENV_ONLY = ("HVNET_STOP_AT", "HVNET_VM_ACCEL")


# -- the file ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileValue:
    """One setting as the file gave it, with its line (for messages that point at it)."""

    value: str
    line: int


@dataclass(frozen=True)
class ConfigFile:
    """A parsed configuration file: values by variable name, each with its line."""

    path: Optional[Path]  # None: no file (the default one is absent)
    values: Mapping[str, FileValue]

    def where(self, env: str) -> str:
        return f"{self.path}:{self.values[env].line}"


_SECTION = re.compile(r"^\[\s*([^\]]*?)\s*\]$")
_KEY = re.compile(r"^([A-Za-z0-9_.-]+)\s*[=:]\s*(.*)$")


def _suggest(word: str, choices: list[str]) -> str:
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f"; did you mean {lowered[close[0]]}?" if close else ""


def parse(text: str, path: Path) -> ConfigFile:
    """The settings in ``text`` (the file at ``path``), every problem at once as a :class:`ConfigError`."""
    problems: list[Problem] = []
    values: dict[str, FileValue] = {}
    section: Optional[str] = None
    where = str(path)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m and not raw[0].isspace():
            section = m.group(1)
            if section not in SECTIONS:
                problems.append(Problem(where, n, f"[{section}]", "unknown section; allowed: "
                                        + ", ".join(SECTIONS) + _suggest(section, list(SECTIONS))))  # fmt: skip
                section = "?"
            continue
        found = _key_line(raw, section)
        if isinstance(found, Problem):
            problems.append(Problem(where, n, found.field, found.message))
        elif found is not None:
            setting, value = found
            if setting.env in values:
                first = values[setting.env].line
                problems.append(Problem(where, n, setting.name, f"given twice (first on line {first})"))
            else:
                values[setting.env] = FileValue(value, n)
    if "HVNET_DB" in values and "HVNET_HOST" in values:
        line = max(values["HVNET_DB"].line, values["HVNET_HOST"].line)
        problems.append(Problem(where, line, "target", "db and host name two different switches; give one"))
    if problems:
        raise ConfigError(problems)
    return ConfigFile(path, values)


def _key_line(raw: str, section: Optional[str]) -> Problem | tuple[Setting, str] | None:
    """A ``key = value`` line's setting and checked value, or what is wrong with it (file and line left
    to the caller); None for a line of an unknown section (reported at its header)."""
    if raw[0].isspace():
        return Problem("", None, "line", "indented line: continuation lines are not read; "
                       "start every key at the beginning of its line")  # fmt: skip
    m = _KEY.match(raw.strip())
    if not m:
        return Problem("", None, "line", "not a [section] header, a key = value line or a comment")
    key, value = m.group(1), m.group(2).strip()
    if section is None:
        return Problem("", None, key, "comes before any [section] header")
    if section == "?":
        return None
    setting = BY_NAME.get(f"{section}.{key}")
    if setting is None:
        return Problem("", None, f"{section}.{key}", _unknown_key(section, key))
    if not value:
        return Problem("", None, setting.name, "empty; leave the line out (or comment it) for the default")
    if re.search(r"\s[#;]", value):
        return Problem("", None, setting.name, "a comment after the value is not read; put it on a line of its own")
    try:
        setting.check(value)
    except ValueError as exc:
        from appliance.core.validate import redact_url  # a password given in a URL is not repeated in the error

        return Problem("", None, setting.name, f"{redact_url(value)!r} is not allowed; allowed: {exc}")
    return setting, value


def _unknown_key(section: str, key: str) -> str:
    here = [s.key for s in SETTINGS if s.section == section]
    message = f"unknown key; [{section}] takes " + ", ".join(here)
    hint = _suggest(key, here)
    if not hint:  # perhaps a key of another section
        elsewhere = [s.name for s in SETTINGS if s.key == key]
        hint = f"; did you mean {elsewhere[0]}?" if elsewhere else _suggest(f"{section}.{key}", list(BY_NAME))
    return message + hint


_cache: dict[tuple[str, int, int, int], ConfigFile] = {}


def config_path(environ: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """The configuration file and whether it was named (``$HVNET_CONFIG``) rather than the default."""
    env = os.environ if environ is None else environ
    named = env.get(CONFIG_VARIABLE)
    return (Path(named), True) if named else (DEFAULT_FILE, False)


def load(environ: Mapping[str, str] | None = None) -> ConfigFile:
    """The configuration file in use, parsed (kept while the file is unchanged).

    The default file may be absent (built-in defaults); a file named by
    ``$HVNET_CONFIG`` must exist.  Either way a broken file is an error (exit 2).
    """
    path, named = config_path(environ)
    try:
        text, st = trusted.read(path, "hvnet.conf")
    except FileNotFoundError:
        if named:
            raise UsageError(f"{CONFIG_VARIABLE}: no such file: {path}",
                             hint=f"unset {CONFIG_VARIABLE} to read {DEFAULT_FILE}") from None  # fmt: skip
        return ConfigFile(None, {})
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = parse(text, path)
    return cached


# -- the layers ----------------------------------------------------------------------------


class Layered(Mapping[str, str]):
    """The environment with the configuration file's values beneath it, by variable name.

    Readers see a variable's value when it is set and not empty, else the
    file's; :meth:`origin` says which.  The environment is read live.
    """

    def __init__(self, environ: Mapping[str, str], file: ConfigFile) -> None:
        self.env = environ
        self.file = file

    def _from_file(self, name: str) -> Optional[str]:
        fv = self.file.values.get(name)
        if fv is None or self.env.get(name) or any(self.env.get(o) for o in BY_ENV[name].also_env):
            return None
        return fv.value

    def __getitem__(self, name: str) -> str:
        value = self.env.get(name) or self._from_file(name)
        if value is None:
            if name in self.env:
                return self.env[name]  # set but empty: as the environment has it
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        yield from self.env
        yield from (k for k in self.file.values if k not in self.env)

    def __len__(self) -> int:
        return len(self.env) + sum(1 for k in self.file.values if k not in self.env)

    def without(self, *names: str) -> Layered:
        """The same layers with ``names`` unset in both (the console's way back to this machine)."""
        env = {k: v for k, v in self.env.items() if k not in names}
        kept = {k: v for k, v in self.file.values.items() if k not in names}
        return Layered(env, ConfigFile(self.file.path, kept))

    def where(self, name: str) -> str:
        """How an error names the value's origin: the variable, or the file's ``path:line``."""
        return self.file.where(name) if self.origin(name) == "file" else name

    def origin(self, name: str) -> Optional[str]:
        """``env``, ``file`` or None: where the value :meth:`get` returns comes from."""
        if self.env.get(name):
            return "env"
        return "file" if self._from_file(name) is not None else None


def environ(base: Mapping[str, str] | None = None) -> Layered:
    """``base`` (default: this process's environment) over the configuration file it names."""
    env = os.environ if base is None else base
    return Layered(env, load(env))


def origin(env: Mapping[str, str], name: str) -> Optional[str]:
    """Where ``env[name]`` comes from: ``env``, ``file`` or None; any other mapping's values count as ``env``."""
    if isinstance(env, Layered):
        return env.origin(name)
    return "env" if env.get(name) else None


def env_only(name: str, environ: Mapping[str, str] | None = None) -> Optional[str]:
    """A variable that has no key in the file (:data:`ENV_ONLY`); None when unset or empty."""
    assert name in ENV_ONLY, name
    return (os.environ if environ is None else environ).get(name) or None


# -- effective values -------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A setting's effective value and where it came from."""

    setting: Setting
    value: Optional[str]
    source: str  # "flag --db", "env HVNET_DB", "/etc/hvnet/hvnet.conf:3", "default"
    kind: str  # flag | env | file | default

    def to_json(self) -> dict[str, object]:
        s = self.setting
        return {"name": s.name, "env": s.env, "flag": s.flag, "value": self.value, "source": self.source,
                "from": self.kind, "default": s.default, "help": s.help}  # fmt: skip


def resolve(
    name: str, flag: Optional[str] = None, env: Mapping[str, str] | None = None, flag_name: Optional[str] = None
) -> Resolved:
    """One setting (``section.key``) with the flag's value, if the caller has one (``flag_name``: a verb's
    own option, when the setting has no global one)."""
    layered = env if isinstance(env, Layered) else environ(env)
    s = BY_NAME[name]
    if flag:
        return Resolved(s, flag, f"flag {flag_name or s.flag}", "flag")
    if layered.env.get(s.env):
        return Resolved(s, layered.env[s.env], f"env {s.env}", "env")
    for other in s.also_env:
        if layered.env.get(other):
            return Resolved(s, layered.env[other], f"env {other}", "env")
    if s.env in layered.file.values:
        return Resolved(s, layered.file.values[s.env].value, layered.file.where(s.env), "file")
    return Resolved(s, s.default, "default", "default")


def effective(flags: Mapping[str, Optional[str]] | None = None, env: Mapping[str, str] | None = None) -> list[Resolved]:
    """Every setting, in file order, with the global flags given (``{"--db": value, ...}``)."""
    layered = env if isinstance(env, Layered) else environ(env)
    flags = flags or {}
    return [resolve(s.name, flags.get(s.flag) if s.flag else None, layered) for s in SETTINGS]


def exporter_listen(flag: Optional[str] = None, env: Mapping[str, str] | None = None) -> Listen:
    """Where the exporter listens: ``--listen``, ``$HVNET_EXPORTER_LISTEN``, ``[exporter] listen``, the default.

    A bad flag or variable is a :class:`UsageError` naming it (the file's value was checked on load).
    """
    r = resolve("exporter.listen", flag, env, flag_name="--listen")
    try:
        host, port = parse_listen(str(r.value))
    except ValueError as exc:
        raise UsageError(f"{r.source}: {r.value!r} is not an address to listen on; allowed: {exc}") from None
    return Listen(host, port, r.source)
