"""Where a suite or an isolation check finds its endpoints: the guest source, chosen once, here.

``hvnet suite run``, ``hvnet isolation check`` and the console's Suites and
Isolation screens all call :func:`measurement`; none of them builds a lab,
checks its guests or picks switches itself.  The choice (``--guests``,
``$HVNET_GUESTS``, ``[measure] guests``):

* ``lab`` -- hvnet's built-in lab: its guests, on its own switch (or its hosts');
* ``probes`` -- probe ports hvnet adds to the target's bridge for the run (the
  file's ``probes:``), on this machine or over ``--host``;
* ``vms`` -- real VMs of the VM inventory (``--vms``, ``$HVNET_VMS``,
  ``[measure] vms``), reached over SSH or through libvirt's QEMU guest agent
  and measured on their VIFs of the driven switch; the file's guest names are
  the inventory's VM names.

Unset, a file that names probes runs on probes, a VM inventory given runs on
its VMs, and anything else on the lab -- unless a real target is named
(``--host``, ``--db``, ``--hosts``, ``--pool``, or their settings): a real
target never falls back to the lab silently, the operator says ``--guests
lab`` to mean it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from appliance.core import config
from appliance.core.errors import UsageError
from appliance.endpoints.guests import GuestSource
from appliance.switch.host import Host

if TYPE_CHECKING:
    from appliance.netperf.define.suite import GuestNeeds


@dataclass
class Measurement:
    """What a run measures with: the switch it drives, its guests, and every switch it spans (the lab's
    hosts by name; None: one switch)."""

    source: str  # lab | probes | vms
    host: Host
    guests: GuestSource
    switches: dict[Optional[str], Host] = field(default_factory=dict)
    where: str = ""  # for reports: which switch and which guests


def choose(
    choice: Optional[str],
    *,
    names_probes: bool,
    real_target: Optional[str],
    what: str,
    vms_given: bool = False,
    names_vms: bool = False,
) -> str:
    """The guest source for a file (``what``: "suite quick") given the operator's choice (pure).

    ``real_target`` says which option or setting names a real switch (None: none does); ``vms_given``,
    whether a VM inventory was named (``--vms`` or its setting)."""
    if choice == "lab" and names_vms:
        raise UsageError(f"{what} names real VMs (vms:), not lab guests; --guests lab cannot run it",
                         hint="drop --guests lab (or $HVNET_GUESTS), and name the VM inventory with --vms")  # fmt: skip
    if choice == "vms" and names_probes:
        raise UsageError(f"{what} names probes, not VMs; --guests vms cannot run it",
                         hint="drop --guests vms, or give a file whose endpoints are VMs of the inventory")  # fmt: skip
    if choice == "lab" and names_probes:
        raise UsageError(f"{what} names probes, not lab guests; --guests lab cannot run it",
                         hint="drop --guests lab (or $HVNET_GUESTS), or give a file with a lab topology")  # fmt: skip
    if choice == "probes" and not names_probes:
        raise UsageError(f"{what} names lab guests; --guests probes needs a file with 'probes:'",
                         hint="add probes: [{name: P1, like: VIF, ip: ADDR/PREFIX}], as endpoints")  # fmt: skip
    if choice is not None:
        return choice
    if names_probes:
        return "probes"
    if vms_given:
        return "vms"
    if real_target is not None:
        raise UsageError(
            f"{what} runs on the built-in lab's guests, but {real_target} names a real target: hvnet does not "
            "fall back to the lab silently",
            hint="measure that host with probes (a file with 'probes:'), or say --guests lab to run it on the lab",
        )
    return "lab"


def real_target(args: Any) -> Optional[str]:
    """Which option or setting names a real switch: ``--host``, ``--db``, ``--hosts``, ``--pool``,
    ``$HVNET_HOST``/``$HVNET_DB`` or their keys in the configuration file; None when none does."""
    for attr, flag in (("host", "--host"), ("db", "--db"), ("hosts", "--hosts"), ("pool", "--pool")):
        value = getattr(args, attr, None)
        if value:
            return f"{flag} {value}"
    env = config.environ()
    for name in ("HVNET_HOST", "HVNET_DB"):
        if env.get(name):
            return f"{name} ({config.origin(env, name)})"
    return None


def choice_of(args: Any) -> Optional[str]:
    """``--guests``, else ``$HVNET_GUESTS`` / ``[measure] guests``, else None (decided by :func:`choose`);
    a setting that is neither lab nor probes is refused naming where it came from (exit 2)."""
    if getattr(args, "guests", None):
        return str(args.guests)  # argparse's choices checked it
    env = config.environ()
    value = env.get("HVNET_GUESTS") or None
    if value is not None and value not in config.GUEST_SOURCES:
        raise UsageError(f"{env.where('HVNET_GUESTS')}: guests {value!r} is not allowed; allowed: "
                         f"{config.GUEST_SOURCES_TEXT}")  # fmt: skip
    return value


def vms_file(args: Any) -> Optional[str]:
    """The VM inventory named: ``--vms``, else ``$HVNET_VMS`` / ``[measure] vms`` (None: none named)."""
    if getattr(args, "vms", None):
        return str(args.vms)
    return config.environ().get("HVNET_VMS") or None


def load_vms(path: Optional[str]) -> Any:
    """The VM inventory (``/etc/hvnet/vms.yaml`` when none is named), validated whole before any VM is
    contacted (a missing or broken file: exit 2 with file:line)."""
    from appliance.core import vmlist

    file = path or str(vmlist.DEFAULT_VMS)
    try:
        return vmlist.load(file)
    except FileNotFoundError:
        raise UsageError(f"no VM inventory {file}",
                         hint="write one (vms: a list of {name: VM, ssh: ADDRESS} or {name: VM, agent: libvirt}) "
                              "and name it with --vms FILE or $HVNET_VMS") from None  # fmt: skip


@contextmanager
def measurement(
    topology: Any,
    probes: tuple[Any, ...],
    what: str,
    *,
    choice: Optional[str],
    real: Optional[str],
    target: Callable[[], Host],
    hosts: Optional[tuple[str, ...]] = None,
    names: Optional[list[str]] = None,
    libvirt: Optional[str] = None,
    timeout: float = 10.0,
    reuse: Optional[Host] = None,
    tools: tuple[str, ...] = (),
    local_only: bool = False,
    vms: Optional[str] = None,
    vm_tools: Optional[dict[str, tuple[str, ...]]] = None,
    vm_names: tuple[str, ...] = (),
) -> Iterator[Measurement]:
    """The guests and switches a run of ``what`` uses, for as long as the ``with`` lasts.

    Lab: the lab that is up must be ``topology``'s (its guests ``names`` checked), its own switch or
    ``hosts`` of it.  Probes: ``target()`` (the Host the global options name, ``reuse`` for the console's)
    with ``probes`` added to its bridge and removed afterwards.  Switches this built are closed after.
    """
    source = choose(choice, names_probes=bool(probes), real_target=real, what=what,
                    vms_given=vms is not None or bool(vm_names), names_vms=bool(vm_names))  # fmt: skip
    if source == "vms":
        from appliance.services.vms import VmSource

        inventory = load_vms(vms)
        host = reuse or target()
        with VmSource(host, inventory, tools=vm_tools or {}, timeout=timeout) as vm_guests:
            yield Measurement("vms", host, vm_guests, {None: host},
                              f"VMs of {inventory.file} on {host.label or host.describe()}")  # fmt: skip
        return
    if source == "probes":
        from appliance.services.probes import ProbeSource

        host = reuse or target()
        if local_only and host.label is not None:  # the traffic method's senders and captures are local
            raise UsageError(f"{what}: the traffic method sends and captures inside probes on this machine, "
                             f"not on {host.label}", hint="check probes over --host with --method trace")  # fmt: skip
        with ProbeSource(host, list(probes), tools=tools, timeout=timeout) as guests:
            where = f"probes on {host.label or host.describe()}"
            if not vm_names:
                yield Measurement("probes", host, guests, {None: host}, where)
                return
            from appliance.services.vms import MixedSource, VmSource

            inventory = load_vms(vms)
            with VmSource(host, inventory, tools=vm_tools or {}, timeout=timeout) as vm_guests:
                yield Measurement("probes", host, MixedSource(guests, vm_guests, vm_names), {None: host},
                                  f"{where} and VMs of {inventory.file}")  # fmt: skip
        return
    from appliance.frontdoor.hosts import lab_switches
    from appliance.lab import Lab

    lab = Lab()
    if topology.hosts:  # the lab that is up must be this one before its hosts are reached
        lab.require_guests(topology, names or [g.name for g in topology.guests])
    switches = lab_switches(topology, lab.db, hosts=hosts, libvirt=libvirt, timeout=timeout, reuse=reuse)
    try:
        where = ", ".join(n for n in switches if n) or "the lab's switch on this machine"
        yield Measurement("lab", next(iter(switches.values())), lab, switches, where)
    finally:
        for h in switches.values():
            if h is not reuse:
                h.close()


def suite_measurement(
    needs: GuestNeeds, args: Any, *, reuse: Optional[Host] = None, real: Optional[str] = None
) -> contextlib.AbstractContextManager[Measurement]:
    """:func:`measurement` for a suite (``needs``: its :attr:`~Suite.guest_needs`): the client's host in a lab
    of several, netperf where the probes run."""
    client_host = needs.topology.guest(needs.client).host
    from appliance.frontdoor.hosts import host_of

    return measurement(
        needs.topology, needs.probes, needs.label, choice=choice_of(args),
        real=real if reuse is not None else real_target(args),
        target=lambda: host_of(args), hosts=(client_host,) if client_host else None,
        names=[needs.client], libvirt=getattr(args, "libvirt", None), timeout=getattr(args, "timeout", 10.0),
        reuse=reuse, tools=needs.tools, vms=vms_file(args), vm_tools=needs.vm_tools, vm_names=needs.vms,
    )  # fmt: skip


def scenario_measurement(
    sc: Any, args: Any, *, method: str = "both", reuse: Optional[Host] = None, real: Optional[str] = None
) -> contextlib.AbstractContextManager[Measurement]:
    """:func:`measurement` for an isolation scenario: every host of a lab of several; probes run no tool
    but the ARP senders and captures (the traffic method runs them on this machine: probes over --host
    take the trace method)."""
    from appliance.frontdoor.hosts import host_of

    return measurement(
        sc.topology, sc.probes, f"scenario {sc.name}", choice=choice_of(args),
        real=real if reuse is not None else real_target(args),
        target=lambda: host_of(args), names=list(sc.guests), libvirt=getattr(args, "libvirt", None),
        timeout=getattr(args, "timeout", 10.0), reuse=reuse,
        tools=("tcpdump",) if method != "trace" else (), local_only=method != "trace", vms=vms_file(args),
        vm_tools={g: ("tcpdump", "python3") if method != "trace" else () for g in sc.guests},
    )  # fmt: skip


def console_target(host: Host) -> tuple[Any, Optional[str]]:
    """The console's options for :func:`suite_measurement` / :func:`scenario_measurement` with ``reuse=host``:
    its settings' choice, and the switch it watches as the real target unless that is the running lab's."""
    from types import SimpleNamespace

    from appliance.core import labstate

    env = config.environ()
    run_dir = labstate.lab_dir(env)
    lab_hosts = labstate.running_lab_hosts(run_dir)
    is_lab = host.remote == labstate.running_lab_db(run_dir) or (
        lab_hosts is not None and host.label in lab_hosts.names
    )
    args = SimpleNamespace(guests=None, libvirt=host.names.libvirt_uri, timeout=10.0)
    return args, None if is_lab else f"the console's switch ({host.label or host.describe()})"
