"""``hvnet``: the command line.

Each subcommand is a small function taking the parsed arguments and returning
an exit code.  Expected failures are :class:`HvnetError` subclasses, printed as
one message (plus a hint) with their exit code; there are no tracebacks for
them.  ``--json`` output is meant for scripts and keeps units in key names.

This module builds the parser and dispatches.  A verb's module is imported
only when the verb runs (:func:`~appliance.cli.common.lazy`); the modules that
declare arguments (``policy_args``, ``capture_args``, ``tap_args``, and the
verb modules light enough to hold their own) load no engine code, and only
when the command line names one of their verbs or asks for help (:func:`_parse`).
So ``hvnet status`` loads the inventory's read side and ``hvnet --help`` nothing
of the engine (``tests/lab/test_startup.py`` checks both).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import gc
import importlib
import io
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from appliance import __version__
from appliance.cli.common import add_hosts_option, lazy
from appliance.core import render, validate
from appliance.core.errors import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_USAGE,
    HOSTS_EXIT_HELP,
    HvnetError,
    error_json,
    hvnet_error_json,
)
from appliance.core.systemd import log_handler

log = logging.getLogger("hvnet")

POOL_VERBS = ("status", "plan", "apply", "verify", "export", "rollback")  # on an OVN pool (and isolation check)

# The modules that declare verbs of their own, and those verbs (tests/unit/cli/test_cli.py checks the
# list against what each declares): a command line that names none of a module's verbs runs without
# loading it (see _parse).
VERB_MODULES: dict[str, tuple[str, ...]] = {
    "appliance.cli.audit": ("audit",),  # an action of 'isolation'
    "appliance.cli.policy_args": (
        "plan", "apply", "verify", "export", "commit", "rollback", "agent", "vif", "qos", "mirror", "sflow", "ipfix",
    ),
    "appliance.cli.suite": ("suite",),
    "appliance.cli.capture_args": ("capture",),
    "appliance.cli.exporter": ("exporter",),
    "appliance.cli.config": ("config",),
    "appliance.cli.tap_args": ("tap",),
    "appliance.cli.probes": ("probes",),
    "appliance.cli.completion": ("completion", "_complete"),
}  # fmt: skip


# -- plumbing ----------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, not {value}")
    return value


# Whether the command line asked for --json: its errors are then JSON too (see _fail).
_JSON_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("hvnet_json_errors", default=False)


def _wants_json(argv: Sequence[str]) -> bool:
    """``--json`` among the options (not in a command after ``--``)."""
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


def _fail(message: str, code: int, *, kind: str, hint: str | None = None, exc: HvnetError | None = None) -> int:
    """Report a failure on stderr and return its exit code: as text, or, when the command line asked for
    ``--json``, as one JSON object (``{"error": {...}}``) so a script reads the failure as it reads the
    result; stdout stays empty either way.  ASCII only: the terminal shows it as sent."""
    if not _JSON_ERRORS.get():
        print(f"hvnet: {exc if exc is not None else message}" + (f"\n  hint: {hint}" if hint and exc is None else ""),
              file=sys.stderr)  # fmt: skip
        return code
    obj = hvnet_error_json(exc) if exc is not None else error_json(message, code, kind=kind, hint=hint)
    stderr = getattr(sys.stderr, "exact", sys.stderr)
    stderr.write(json.dumps(obj, indent=2, ensure_ascii=True) + "\n")
    stderr.flush()
    return code


class _Parser(argparse.ArgumentParser):
    """argparse that exits with :data:`EXIT_USAGE` and a one-line hint (as JSON under ``--json``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"'{self.prog} --help' lists what is allowed"
        if _JSON_ERRORS.get():
            sys.exit(_fail(message, EXIT_USAGE, kind="UsageError", hint=hint))
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"hvnet: error: {message}\n  hint: {hint}\n")


class _Verbs(argparse._SubParsersAction):  # type: ignore[type-arg]
    """hvnet's verbs, each built in full only when the command line names it.

    Every verb is listed with its one-line help: all that ``hvnet --help`` and an unknown verb's
    error show of it.  What a verb declares -- its own verbs, its arguments, its defaults -- goes to
    a parser only when the verb's name is among ``named``, the command line's words: a command uses
    one verb of 26, and building the others' parsers (60 of them, 300 arguments, a gettext lookup
    and a help formatter each) was a tenth of ``hvnet status``.  ``named`` None builds everything
    (the completion script and the man page are generated from the whole parser).
    """

    def __init__(self, *args: Any, named: frozenset[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._named = named

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self._named is None or not self._named.isdisjoint([name, *kwargs.get("aliases", ())]):
            return super().add_parser(name, **kwargs)
        parser_class, self._parser_class = self._parser_class, _Unbuilt
        try:  # listed (its help, its aliases), with no parser behind it
            return super().add_parser(name, **{k: v for k, v in kwargs.items() if k in ("help", "aliases")})
        finally:
            self._parser_class = parser_class


class _Unbuilt:
    """A verb the command line does not name: whatever it declares is taken and dropped."""

    def __init__(self, **_kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return self._drop

    def _drop(self, *args: Any, **kwargs: Any) -> _Unbuilt:
        return self


def _declare(module: str, named: frozenset[str] | None, only_named: bool) -> Any:
    """The module declaring some of hvnet's verbs (:data:`VERB_MODULES`), or None where ``only_named``
    and the command line names none of them."""
    if only_named and named is not None and named.isdisjoint(VERB_MODULES[module]):
        return None
    return importlib.import_module(module)


def build_parser(argv: Sequence[str] | None = None, *, only_named: bool = False) -> argparse.ArgumentParser:
    """hvnet's parser; given the command line ``argv``, only the verbs it names are built in full (see
    :class:`_Verbs`), the parser of one command.  ``only_named``: the verbs of a module of
    :data:`VERB_MODULES` that ``argv`` does not name are not even listed (nor the module loaded): a
    parser that parses ``argv`` as the whole one does, but whose help and errors would list less."""
    p = _Parser(
        prog="hvnet",
        description="Host networking for XenServer and KVM hypervisors: see and manage what Open vSwitch "
        "does for your VMs.",
        epilog="OVSDB target, first match wins: --db, $HVNET_DB, [target] db in hvnet.conf, a running hvnet lab "
        "(unless --no-lab), unix:/var/run/openvswitch/db.sock. tcp: targets are unencrypted and unauthenticated: "
        "prefer ssl:. Settings: flags, then $HVNET_* variables, then /etc/hvnet/hvnet.conf ($HVNET_CONFIG), then "
        "defaults ('hvnet config show')."
        "\n\n" + EXIT_CODES_HELP + "\n\n" + HOSTS_EXIT_HELP.replace(": 6", ":\n  6"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"hvnet {__version__}")
    p.add_argument(
        "--db", metavar="TARGET",
        help="OVSDB target: unix:PATH, tcp:HOST[:PORT] or ssl:HOST[:PORT] (port 6640 by default; [IPv6]:PORT), "
        "or a cluster's servers separated by commas, tried in order ($HVNET_DB)",
    )  # fmt: skip
    p.add_argument(
        "--host",
        metavar="[USER@]NAME[:PORT]",
        help="a remote hypervisor over SSH, nothing installed there ($HVNET_HOST; the system ssh client, "
        "strict host keys, ~/.ssh/config)",
    )
    p.add_argument(
        "--pool",
        metavar="NAME",
        help="an OVN pool of the inventory (its 'pools:'): status shows its logical switches, ports and chassis; "
        "plan/apply/verify FILE set its ports' limits (QoS rules), logical switches (vlan) and mirrors in its NB; "
        "export and rollback as on a host; isolation check FILE checks a pool scenario on it",
    )
    p.add_argument(
        "--pool-wait",
        type=float,
        default=30.0,
        metavar="S",
        help="with --pool apply or rollback: wait up to S seconds for every chassis to acknowledge (default 30)",
    )
    p.add_argument(
        "--guests", choices=("lab", "probes", "vms"),
        help="where suite run and isolation check find their endpoints: the built-in lab's guests, probe "
        "ports hvnet adds to the target's bridge for the run (the file's 'probes:'), or real VMs of the VM "
        "inventory (--vms); default: probes when the file names them, the VMs when --vms is given, else the "
        "lab -- but never the lab silently when --host/--db/--hosts/--pool names a real target ($HVNET_GUESTS)",
    )  # fmt: skip
    p.add_argument(
        "--vms", metavar="FILE",
        help="the VM inventory: the real VMs a suite's client and server name, each reached over SSH or "
        "through libvirt's QEMU guest agent, measured on its VIF of the driven switch ($HVNET_VMS; with "
        "--guests vms and no file: /etc/hvnet/vms.yaml)",
    )  # fmt: skip
    p.add_argument(
        "--no-lab",
        action="store_true",
        help="never use a running hvnet lab as the target: --db, $HVNET_DB, else the system OVS "
        "(the hvnet-agent service runs with it)",
    )
    # OVS's own spellings too (ovs-vsctl -p/--private-key, -c/--certificate, -C/--ca-cert): one dest each.
    p.add_argument("--ssl-key", "-p", "--private-key", dest="ssl_key", metavar="FILE",
                   help="private key for ssl: targets ($HVNET_SSL_KEY)")  # fmt: skip
    p.add_argument("--ssl-cert", "-c", "--certificate", dest="ssl_cert", metavar="FILE",
                   help="certificate for ssl: targets ($HVNET_SSL_CERT)")  # fmt: skip
    p.add_argument("--ssl-ca", "-C", "--ca-cert", dest="ssl_ca", metavar="FILE",
                   help="CA certificate for ssl: targets ($HVNET_SSL_CA)")  # fmt: skip
    p.add_argument(
        "--libvirt",
        metavar="URI",
        help="libvirt URI for VM names, states and interfaces, or 'none' "
        "($HVNET_LIBVIRT_URI; default qemu:///system when its daemon runs)",
    )
    p.add_argument("--timeout", type=_positive_float, default=5.0, metavar="S", help="connect timeout (default 5 s)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    named = None if argv is None else frozenset(argv)
    sub = p.add_subparsers(
        dest="command", metavar="COMMAND", title="commands", parser_class=_Parser, action=_Verbs, named=named
    )

    h = sub.add_parser(
        "hosts",
        help="the inventory's hypervisors: reachable over SSH, OVS, datapath, VIFs, agent, policy drift; "
        "exit 0 all reachable, else the worst host's (3 unreachable)",
    )
    h.add_argument("--hosts", metavar="NAME,NAME|GROUP|all", help="only these hosts (default: all); " + HOSTS_EXIT_HELP)
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.set_defaults(func=lazy("appliance.cli.hosts", "cmd_hosts"))

    s = sub.add_parser("status", help="show the host's bridges and VIFs (VM, VLAN, QoS, mirrors, counters)")
    s.add_argument("--json", action="store_true", help="machine-readable output (units in key names)")
    s.add_argument("--all", action="store_true", help="include ports that are not VM interfaces")
    s.add_argument("--bridge", metavar="BR", help="only this bridge")
    s.add_argument(
        "--rates", type=_positive_float, metavar="S", help="sample counters twice, S seconds apart, and show rates"
    )
    add_hosts_option(s)
    s.set_defaults(func=lazy("appliance.cli.status", "cmd_status"))

    lab = sub.add_parser("lab", help="the built-in lab: a private OVS with namespace guests (up, down, status)")
    lsub = lab.add_subparsers(dest="lab_command", metavar="ACTION", required=True, parser_class=_Parser)
    up = lsub.add_parser("up", help="start the lab (idempotent)")
    up.add_argument("--topology", metavar="FILE", help="topology YAML (default: the 2010 study's)")
    up.add_argument(
        "--vm-access",
        action="store_true",
        help="reach every namespace guest like a VM: its own sshd on a management link (not its data "
        "interface), an ssh_config with strict host keys, and the VM inventory vms.yaml in the lab's run directory",
    )
    up.add_argument("--json", action="store_true", help="machine-readable output")
    up.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_up"))
    down = lsub.add_parser("down", help="remove every namespace, veth, daemon and file the lab created")
    down.add_argument("--json", action="store_true", help="machine-readable output")
    down.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_down"))
    st = lsub.add_parser("status", help="show whether the lab is up and what it holds (exit 1 if not up)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_status"))
    im = lsub.add_parser("image", help="build the probe guest image for QEMU guests (or find it in the cache)")
    im.add_argument("--force", action="store_true", help="rebuild even when the cached image is current")
    im.add_argument("--cache", metavar="DIR", help="cache directory (default /var/cache/hvnet/image)")
    im.add_argument("--json", action="store_true", help="machine-readable output")
    im.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_image"))
    ex = lsub.add_parser("exec", help="run a command inside a lab guest (namespace or QEMU VM); its exit status")
    ex.add_argument("guest", metavar="GUEST", help="guest name from the topology")
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command and its arguments")
    ex.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_exec"))

    iso = sub.add_parser("isolation", help="ARP/VLAN isolation checks: who hears whom, versus the VLAN config")
    isub = iso.add_subparsers(dest="isolation_command", metavar="ACTION", required=True, parser_class=_Parser)
    ic = isub.add_parser("check", help="run a scenario (vlan-tests/*.yaml); exit 0 match, 1 leak/block, 7 undecided")
    ic.add_argument("file", metavar="FILE", help="scenario YAML")
    ic.add_argument("--method", choices=("traffic", "trace", "both"), default="both", help="default: both")
    ic.add_argument("--json", action="store_true", help="machine-readable output")
    ic.add_argument("--out", metavar="DIR", help="where to keep the pcap files (default /var/lib/hvnet/isolation/...)")
    ic.add_argument("--html", metavar="FILE", help="also write the matrices and evidence as one self-contained page")
    ic.add_argument("--junit", metavar="FILE", help="also write JUnit XML: a test case per method and pair, for CI")
    ic.set_defaults(func=lazy("appliance.cli.isolation", "cmd_isolation_check"))
    ir = isub.add_parser(
        "report", help="print a saved result (check --json) again, or write it as HTML; exits as the check did"
    )
    ir.add_argument("result", metavar="RESULT", help="a result saved with: hvnet isolation check ... --json > RESULT")
    ir.add_argument("--html", metavar="FILE", help="write one self-contained HTML page instead of printing")
    ir.add_argument("--json", action="store_true", help="print the result as check --json does (with --html too)")
    ir.add_argument("--junit", metavar="FILE", help="also write JUnit XML: a test case per method and pair, for CI")
    ir.set_defaults(func=lazy("appliance.cli.isolation", "cmd_isolation_report"))
    if audit := _declare("appliance.cli.audit", named, only_named):
        audit.register(isub)

    for module in VERB_MODULES:
        if module not in ("appliance.cli.audit", "appliance.cli.completion") and (
            declaring := _declare(module, named, only_named)
        ):
            declaring.register(sub)

    t = sub.add_parser("tui", help="open the terminal UI")
    t.add_argument(
        "--screen", default="vifs", choices=("fleet", "host", "vifs", "mirrors", "suites", "isolation", "log"),
        help="the screen to open first (default: vifs)",
    )  # fmt: skip
    t.set_defaults(func=lazy("appliance.cli.console", "cmd_tui"))
    if completion := _declare("appliance.cli.completion", named, only_named):
        completion.register(sub, build_parser)
    return p


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by a parser of the verbs it names only (``only_named``), else by the whole one.

    A parser that leaves out the verbs a command line does not name parses it the same (the verb it
    runs is among the words it has); only its help and its errors would differ, since they list
    the verbs.  So it is tried first, quietly, and whatever it would print and exit on (help, an
    error, the version) is done by the whole parser instead: ``hvnet status`` does not load the
    modules of the 20 other verbs (a tenth of its start-up where Python has no bytecode cache).
    """
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            return build_parser(argv, only_named=True).parse_args(argv)
    except SystemExit:
        return build_parser(argv).parse_args(argv)


ONE_SHOT = frozenset({"status", "plan", "verify", "export", "hosts"})  # verbs that read once and exit


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its text output shown through :class:`render.TerminalStream` (names cannot steer
    the terminal), except the console's, which draws the terminal itself and escapes what it shows."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = render.TerminalStream(sys.stdout), render.TerminalStream(sys.stderr)
    try:
        return _main(argv, streams)
    finally:
        sys.stdout, sys.stderr = streams


def _refuse_control(argv: Sequence[str]) -> str | None:
    """Why an argument cannot be taken (a name holding control characters), checked before anything else;
    what follows ``--`` (a command for ``lab exec``) is passed on as given."""
    for i, arg in enumerate(argv, start=1):
        if arg == "--":
            return None
        try:
            validate.no_control(arg)
        except ValueError as exc:
            return f"argument {i} ('{render.terminal(arg)}'): {exc}"
    return None


def _main(argv: Sequence[str] | None, streams: tuple[object, object]) -> int:
    argv = sys.argv[1:] if argv is None else argv
    token = _JSON_ERRORS.set(_wants_json(argv))
    try:
        return _run(argv, streams)
    finally:
        _JSON_ERRORS.reset(token)


def _run(argv: Sequence[str], streams: tuple[object, object]) -> int:
    refused = _refuse_control(argv)
    if refused:
        return _fail(refused, EXIT_USAGE, kind="UsageError")
    args = _parse(argv)
    if args.command == "tui":
        sys.stdout, sys.stderr = streams  # type: ignore[assignment]
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        handlers=[log_handler("hvnet")],  # "<N>message" when stderr is the journal, else "hvnet: level: message"
    )
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        build_parser(argv).print_help()  # every verb listed
        return EXIT_USAGE
    pool_check = args.command == "isolation" and getattr(args, "isolation_command", None) == "check"
    if getattr(args, "pool", None) and args.command not in POOL_VERBS and not pool_check:
        return _fail(f"--pool works with {', '.join(POOL_VERBS)} and isolation check; '{args.command}' manages "
                     "one switch (--host, --db)", EXIT_USAGE, kind="UsageError")  # fmt: skip
    if args.command in ONE_SHOT:
        # Read the switch once, print, exit: every object made is kept to the end, so the cyclic
        # collector would only walk them again (about a tenth of 'status' on a 1000-VIF host).
        gc.disable()
    try:
        return func(args)
    except HvnetError as exc:
        return _fail(exc.message, exc.exit_code, kind=type(exc).__name__, exc=exc)
    except KeyboardInterrupt:
        return _fail("interrupted", 130, kind="Interrupted")
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
