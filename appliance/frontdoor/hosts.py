"""The front door: the one place a :class:`~appliance.switch.host.Host` is built from
command-line options, the environment and the configuration file.

The CLI, the console and the agent call :func:`build_host` once; everything
below receives the Host and reads no ``HVNET_*`` variable itself.  Each
variable below has a key in ``hvnet.conf`` (:mod:`appliance.core.config`): the
environment given here is :func:`appliance.core.config.environ`, the process's
variables over the file's values.  The variables read here:

* ``HVNET_DB``, ``HVNET_SSL_KEY|CERT|CA`` -- the OVSDB target (after ``--db``);
* ``HVNET_LAB_DIR`` -- where a running lab is looked for (its record, not its code);
* ``HVNET_STATE_DIR``, ``HVNET_AUDIT_LOG``, ``HVNET_RUNS_DIR``, ``HVNET_CAPTURES_DIR``,
  ``HVNET_PCAP_DIR`` -- data paths;
* ``HVNET_LIBVIRT_URI``, ``LIBVIRT_DEFAULT_URI``, ``HVNET_XAPI_*`` -- VM name sources;
* ``HVNET_HOST`` -- a remote hypervisor over SSH (after ``--host``), with
  ``HVNET_SSH_CONFIG``, ``HVNET_SSH_KNOWN_HOSTS``, ``HVNET_SSH_IDENTITY`` and
  ``HVNET_REMOTE_OVS_RUNDIR`` (default ``/var/run/openvswitch``);
* ``HVNET_STOP_AT`` -- a fault drill's step (see :meth:`~appliance.switch.host.Host.checkpoint`).
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from appliance.core import config, labstate
from appliance.core.errors import UsageError
from appliance.core.target import SYSTEM_DB, DbTarget, resolve
from appliance.switch.host import DataPaths, Host, NameConfig

if TYPE_CHECKING:
    from appliance.endpoints.topology import Topology

log = logging.getLogger("hvnet.target")

NAME_VARIABLES = (
    "HVNET_LIBVIRT_URI",
    "LIBVIRT_DEFAULT_URI",
    "HVNET_XAPI_URL",
    "HVNET_XAPI_CREDENTIALS",
    "HVNET_XAPI_TIMEOUT",
    "HVNET_XAPI_CA",
    "HVNET_XAPI_FINGERPRINT",
)
XAPI_VARIABLES = ("HVNET_XAPI_URL", "HVNET_XAPI_CREDENTIALS", "HVNET_XAPI_CA", "HVNET_XAPI_FINGERPRINT")


DATA_VARIABLES = {
    "state_dir": "HVNET_STATE_DIR",
    "audit_log": "HVNET_AUDIT_LOG",
    "runs_dir": "HVNET_RUNS_DIR",
    "captures_dir": "HVNET_CAPTURES_DIR",
    "pcap_dir": "HVNET_PCAP_DIR",
}
LAB_OWN = ("state_dir", "audit_log")  # a lab's own, whatever hvnet.conf says (a variable still moves them)


def data_paths(environ: Mapping[str, str], lab_run_dir: Path | None = None) -> DataPaths:
    """Default paths, the lab's own when the target is the lab's, then the settings' overrides.

    The configuration file's ``state_dir`` and ``audit_log`` are a hypervisor's: a lab's rollback
    records and audit log stay in its run directory, so that ``lab down`` leaves nothing behind."""
    paths = DataPaths() if lab_run_dir is None else DataPaths.for_lab(lab_run_dir)
    overrides = {}
    for field, name in DATA_VARIABLES.items():
        if lab_run_dir is not None and field in LAB_OWN and config.origin(environ, name) == "file":
            continue
        if environ.get(name):
            overrides[field] = Path(environ[name])
    floor = environ.get("HVNET_CAPTURE_FREE_FLOOR")
    return replace(paths, **overrides, **({"pcap_free_floor": floor} if floor else {}))


def build_host(
    db: str | None = None,
    *,
    ssl_key: str | None = None,
    ssl_cert: str | None = None,
    ssl_ca: str | None = None,
    libvirt: str | None = None,
    environ: Mapping[str, str] | None = None,
    discover_lab: bool = True,
    ssh_host: str | None = None,
    timeout: float = 10.0,
) -> Host:
    """The Host for these options: the target (``--db``, ``$HVNET_DB``, a running lab, the
    system's OVS), its data paths and its VM name sources.

    ``discover_lab=False`` leaves the lab out of the resolution: a hypervisor's agent
    (``hvnet --no-lab agent`` in its unit) must keep policing the system OVS even while
    someone runs a lab on the same machine.
    """
    env = config.environ() if environ is None else environ
    remote_host = ssh_host if ssh_host is not None else configured_host(db, env)
    run_dir = labstate.lab_dir(env)
    if remote_host is None and not db and not env.get("HVNET_DB") and discover_lab:
        lab_hosts = labstate.running_lab_hosts(run_dir)
        if lab_hosts is not None:  # a lab of several hypervisors: its first one, as 'hvnet --host' would reach it
            log.info("the lab's hosts are %s; using %s (--host names another)", ", ".join(lab_hosts.names),
                     lab_hosts.names[0])  # fmt: skip
            remote_host = lab_hosts.names[0]
    if remote_host is not None:
        if db:
            raise UsageError("--db and --host name two different switches: give one")
        return _remote_host(remote_host, env, libvirt, timeout)
    lab_db = labstate.running_lab_db(run_dir) if discover_lab else None
    target = resolve(db, ssl_key=ssl_key, ssl_cert=ssl_cert, ssl_ca=ssl_ca, environ=env, lab_db=lab_db)
    _warn_if_insecure(target)
    check_xapi(env, env.where("HVNET_XAPI_URL") if isinstance(env, config.Layered) else "HVNET_XAPI_URL")
    is_lab = lab_db is not None and target.remote == lab_db
    names = NameConfig(
        libvirt_uri=libvirt,
        environ=MappingProxyType({k: env[k] for k in NAME_VARIABLES if k in env}),
        static=MappingProxyType(labstate.lab_vm_names(run_dir, target.remote) if is_lab else {}),
    )
    paths = data_paths(env, run_dir.resolve() if is_lab else None)
    return Host(target, paths=paths, names=names, stop_at=env.get("HVNET_STOP_AT") or None)


def configured_host(db: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """``$HVNET_HOST`` or the file's ``[target] host``, unless something of higher rank names a database:
    ``--db``, or ``$HVNET_DB`` over a host from the file (flags, then variables, then the file)."""
    env = config.environ() if env is None else env
    host = env.get("HVNET_HOST") or None
    if host is None or db:
        return None
    if config.origin(env, "HVNET_HOST") == "file" and config.origin(env, "HVNET_DB") == "env":
        return None
    return host


def _remote_host(text: str, env: Mapping[str, str], libvirt: str | None, timeout: float) -> Host:
    """A hypervisor over SSH: one master connection carries its programs and its forwarded OVSDB socket.

    The journal (state, audit log) stays on this machine, one record per
    target as for any switch (see :meth:`~appliance.policy.apply.journal.Journal.for_host`).
    A host named from the inventory keeps that name (the journal's and a
    --no-commit watcher's ``--host``).  The master is closed when hvnet exits.
    """
    from appliance.core.ssh import SshOptions, SshRunner, SshSession, SshTarget

    entry = _inventory_entry(text, env)
    lab = _lab_hosts(env) if entry is not None else None
    lab_paths = None
    static: dict[str, str] = {}
    if entry is not None:  # a name from the inventory: its address, user, port and OVS run directory
        text = entry.ssh
        env = {**env, "HVNET_REMOTE_OVS_RUNDIR": env.get("HVNET_REMOTE_OVS_RUNDIR") or entry.ovs_rundir}
        if entry.xapi_url and entry.xapi_credentials:
            # its pool master's XAPI names its VMs (one session per pool: the hosts of a pool share it)
            env = {k: v for k, v in env.items() if k not in XAPI_VARIABLES}
            own = zip(XAPI_VARIABLES, (entry.xapi_url, entry.xapi_credentials, entry.xapi_ca, entry.xapi_fingerprint))
            env.update((k, v) for k, v in own if v)
            check_xapi(env, f"{inventory_file(env)}: host {entry.name}")
    if lab is not None and entry is not None and entry.name in lab.names:
        # one of the lab's hypervisors: its ssh_config (key, known_hosts), its own state and audit log, its VM names
        env = {**env, "HVNET_SSH_CONFIG": env.get("HVNET_SSH_CONFIG") or str(lab.ssh_config)}
        lab_paths = lab.host_dir(entry.name)
        static = lab.vm_names
    target = SshTarget.parse(text, "--host/$HVNET_HOST")
    label = entry.name if entry else str(target)
    options = SshOptions(
        known_hosts=_path(env.get("HVNET_SSH_KNOWN_HOSTS")),
        identity=_path(env.get("HVNET_SSH_IDENTITY")),
        config=_path(env.get("HVNET_SSH_CONFIG")),
        connect_timeout=timeout,
    )
    session = SshSession(target, options)
    atexit.register(session.close)
    session.open()
    rundir = Path(env.get("HVNET_REMOTE_OVS_RUNDIR") or "/var/run/openvswitch")
    local = session.work_dir / "db.sock"
    session.forward_unix(local, str(rundir / "db.sock"))
    db = DbTarget(f"unix:{local}", f"--host {label}", where=f"{rundir / 'db.sock'} on {label}")
    # This machine's libvirt knows nothing of the remote host's VMs: asked only when named (--libvirt).
    names = NameConfig(libvirt_uri=libvirt or "none",
                       environ=MappingProxyType({k: env[k] for k in NAME_VARIABLES if k in env}),
                       static=MappingProxyType(static))  # fmt: skip
    paths = data_paths(env, lab_paths)
    return Host(db, paths=paths, runner=SshRunner(session), names=names, ovs_rundir=rundir,
                stop_at=env.get("HVNET_STOP_AT") or None, label=label)  # fmt: skip


def inventory_file(env: Mapping[str, str] | None = None) -> Path:
    """The host inventory: ``$HVNET_INVENTORY`` (or the file's ``[remote] inventory``), else a running
    lab's hosts, else ``/etc/hvnet/hosts.yaml``."""
    env = config.environ() if env is None else env
    from appliance.core.hostlist import DEFAULT_INVENTORY

    if env.get("HVNET_INVENTORY"):
        return Path(env["HVNET_INVENTORY"])
    lab = _lab_hosts(env)
    return lab.inventory if lab is not None else DEFAULT_INVENTORY


def _lab_hosts(env: Mapping[str, str]) -> labstate.LabHosts | None:
    """The running lab of several hypervisors, when its inventory is the one in use."""
    if env.get("HVNET_INVENTORY"):
        return None
    return labstate.running_lab_hosts(labstate.lab_dir(env))


def _inventory_entry(name: str, env: Mapping[str, str]) -> Any:
    """The inventory's entry called ``name``, when there is an inventory (a broken one is an error)."""
    path = inventory_file(env)
    if "@" in name or ":" in name or not path.exists():
        return None
    from appliance.core.hostlist import load

    return load(path).get(name)


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


_warned: set[str] = set()


def _warn_if_insecure(target: DbTarget) -> None:
    """Say once per process and remote that a ``tcp:`` target is neither encrypted nor authenticated.

    OVSDB over tcp: lets anyone who can reach the port read and rewrite the
    switch; it is fine on a loopback test bench and dangerous anywhere else,
    and nothing else would tell the operator which of the two this is.
    """
    warning = target.insecure_warning()
    if warning is not None and target.remote not in _warned:
        _warned.add(target.remote)
        log.warning("%s", warning)


def check_xapi(env: Mapping[str, str], source: str) -> None:
    """Before anything is asked: refuse a XAPI URL with credentials in it, a malformed fingerprint and a
    credentials or CA file another user could have written (exit 2); say once per URL that ``http://``
    sends the pool's password in clear, as for a ``tcp:`` target.  ``source`` names where the URL came
    from.  A credentials file that is absent is left to the lookup (a warning, VMs keep their uuids)."""
    url = env.get("HVNET_XAPI_URL")
    if not url:
        return
    from appliance.core import trusted
    from appliance.core.validate import redact_url, sha256_fingerprint, xapi_url

    try:
        xapi_url(url)
    except ValueError as exc:
        raise UsageError(f"{source}: XAPI URL {redact_url(url)!r} is not allowed; allowed: {exc}") from None
    pin = env.get("HVNET_XAPI_FINGERPRINT")
    try:
        if pin:
            sha256_fingerprint(pin)
    except ValueError as exc:
        raise UsageError(f"HVNET_XAPI_FINGERPRINT: {pin!r} is not allowed; allowed: {exc}") from None
    for name, what in (("HVNET_XAPI_CREDENTIALS", "the XAPI credentials"), ("HVNET_XAPI_CA", "the XAPI CA file")):
        path = env.get(name)
        if path and Path(path).exists():
            fd, _ = trusted.open_checked(path, what)
            os.close(fd)
    from appliance.switch.xapi import insecure_warning  # XenAPI: loaded only where XAPI is configured

    warning = insecure_warning(url, source)
    if warning is not None and url not in _warned:
        _warned.add(url)
        log.warning("%s", warning)


def host_of(args: Any) -> Host:
    """The Host the global command-line options name (``--db``, ``--ssl-*``, ``--libvirt``, ``--no-lab``),
    built once per command and kept on ``args``."""
    host: Host | None = getattr(args, "_host", None)
    if host is None:
        host = build_host(
            args.db, ssl_key=args.ssl_key, ssl_cert=args.ssl_cert, ssl_ca=args.ssl_ca, libvirt=args.libvirt,
            discover_lab=not args.no_lab, ssh_host=getattr(args, "host", None), timeout=args.timeout,
        )  # fmt: skip
        args._host = host
    return host


def hosts_by_name(names: tuple[str, ...] | list[str], timeout: float = 10.0) -> dict[str, Host]:
    """A Host per name (the inventory's, a running lab's), reached over SSH in parallel; each closed at exit.

    A check or a suite spread over a lab's hosts needs every one of them; a host that cannot be
    reached fails the whole (before anything is touched), naming it."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(names)))) as pool:
        built = list(pool.map(lambda n: build_host(ssh_host=n, timeout=timeout), names))
    return dict(zip(names, built))


GLOBAL_FLAGS = {"--db": "db", "--host": "host", "--ssl-key": "ssl_key", "--ssl-cert": "ssl_cert",
                "--ssl-ca": "ssl_ca", "--libvirt": "libvirt", "--guests": "guests"}  # fmt: skip


def effective_settings(args: Any) -> list[config.Resolved]:
    """Every setting as the global options, the environment and the file make it, and where each came
    from (``hvnet config show``); what :func:`build_host` would do without a target setting is shown
    too: a running lab's database or first host, and that lab's own state directory and audit log."""
    env = config.environ()
    flags = {flag: getattr(args, attr, None) for flag, attr in GLOBAL_FLAGS.items()}
    rows = {r.setting.name: r for r in config.effective(flags, env)}
    if args.db or args.host or rows["target.db"].value or rows["target.host"].value:
        return list(rows.values())
    run_dir = labstate.lab_dir(env)
    lab_hosts = None if args.no_lab else labstate.running_lab_hosts(run_dir)
    lab_db = None if args.no_lab or lab_hosts is not None else labstate.running_lab_db(run_dir)
    if lab_hosts is None and lab_db is None:
        rows["target.db"] = replace(rows["target.db"], value=SYSTEM_DB)  # the system's OVS: the last resort
        return list(rows.values())
    where = f"running lab {run_dir}"
    if lab_hosts is not None:
        rows["target.host"] = replace(rows["target.host"], value=lab_hosts.names[0], source=where, kind="lab")
        own = DataPaths.for_lab(lab_hosts.host_dir(lab_hosts.names[0]))
    else:
        rows["target.db"] = replace(rows["target.db"], value=lab_db, source=where, kind="lab")
        own = DataPaths.for_lab(run_dir.resolve())
    for name, path in (("data.state_dir", own.state_dir), ("data.audit_log", own.audit_log)):
        if rows[name].kind != "env":
            rows[name] = replace(rows[name], value=str(path), source=f"{where} (its own)", kind="lab")
    return list(rows.values())


def local_environ() -> Mapping[str, str]:
    """The settings with no remote host in them (``$HVNET_HOST``, ``[target] host``): this machine's switch."""
    return config.environ().without("HVNET_HOST")


def local_host_of(args: Any) -> Host:
    """This machine's switch as the global options name it, leaving out ``--host``/``$HVNET_HOST``:
    the console's ``local`` entry, to which it can always switch back."""
    env = local_environ()
    return build_host(
        args.db, ssl_key=args.ssl_key, ssl_cert=args.ssl_cert, ssl_ca=args.ssl_ca, libvirt=args.libvirt,
        discover_lab=not args.no_lab, environ=env, timeout=args.timeout,
    )  # fmt: skip


def lab_switches(
    topology: Topology,
    lab_db: str,
    *,
    hosts: tuple[str, ...] | None = None,
    libvirt: str | None = None,
    timeout: float = 10.0,
    reuse: Host | None = None,
) -> dict[str | None, Host]:
    """The switches a lab suite or isolation check drives, whatever ``--db`` says: the lab's own
    (key None; ``reuse`` when it is already that one) or, in a lab of several hypervisors, each of
    ``hosts`` (default: all of the topology's) reached by name over SSH.  The caller has checked
    that the lab that is up is ``topology``'s (``Lab.require_guests``)."""
    if not topology.hosts:
        if reuse is not None and reuse.remote == lab_db:
            return {None: reuse}
        return {None: build_host(lab_db, libvirt=libvirt, timeout=timeout)}
    return dict(hosts_by_name(hosts or topology.hosts, timeout=timeout))
