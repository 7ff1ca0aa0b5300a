"""``hvnet lab up | down | status | image | exec``: the built-in lab's front end.

Loaded only when a lab command runs: the lab and its QEMU guest stack are
beside the product, and ``hvnet status`` or the agent never import them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK, UsageError
from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab

log = logging.getLogger("hvnet")


# -- lab -----------------------------------------------------------------------


def _runs_in(g: dict[str, Any]) -> str:
    """Where a lab guest runs: its namespace, or its libvirt domain and state."""
    if g.get("kind") == "qemu":
        return f"domain {g.get('domain')} ({g.get('domain_state') or 'no domain'})"
    return f"{g['namespace']} on {g['host']}" if g.get("host") else str(g["namespace"])


def up_json(report: Any) -> dict[str, Any]:
    """``lab up --json``: document ``hvnet.lab.up``, what was done and the guests as ``lab status`` has them."""
    return documents.LAB_UP.stamp({"db": report.db, "actions": report.actions, "guests": report.guests,
                                   "vm_access": report.vm_access})  # fmt: skip


def cmd_lab_up(args: argparse.Namespace) -> int:
    # The default is resolved here: building the parser must not load the topology module (and YAML).
    topo = load_topology(DEFAULT_TOPOLOGY if args.topology is None else args.topology)  # validated whole first
    lab = Lab()
    report = lab.up(topo, vm_access=args.vm_access)
    if args.json:
        render.print_json(up_json(report))
        return EXIT_OK
    for action in report.actions or ["already up; nothing to do"]:
        print(f"  {action}")
    print()
    print(
        render.table(
            ["GUEST", "RUNS IN", "VIF", "IP", "MAC"],
            [[g["name"], _runs_in(g), g["vif"], g["ip"], g["mac"]] for g in report.guests],
        )
    )
    if topo.hosts:
        _hosts_hints(topo.hosts, topo.bridges[0].name, lab)
        return EXIT_OK
    print(f"\nlab '{topo.name}' is up. hvnet finds it by itself; other tools need:")
    print(f"  export HVNET_DB={report.db}")
    print(f"  ovs-vsctl --db={report.db} list-ports {topo.bridges[0].name}")
    ns_guest = next((g["name"] for g in report.guests if g.get("kind", "netns") == "netns"), None)
    if ns_guest:
        print(f"  ip netns exec {lab.ns_of(ns_guest)} ping ...")
    vm_guest = next((g for g in report.guests if g.get("kind") == "qemu"), None)
    if vm_guest:
        print(f"  {sys.argv[0]} lab exec {vm_guest['name']} -- ping -c1 ...   (runs inside the VM)")
    if report.vm_access:
        _vm_access_hints(report.vm_access)
    return EXIT_OK


def _vm_access_hints(vm: dict[str, Any]) -> None:
    """Where the guests reached like VMs answer, and the files a client needs."""
    print(f"\nguests reached like VMs (inventory {vm['inventory']}):")
    for name, g in vm["guests"].items():
        print(f"  ssh -F {vm['ssh_config']} {name} ip -j addr      ({g['interface']} {g['address']}:{g['port']})")


def _hosts_hints(hosts: tuple[str, ...], bridge: str, lab: Lab) -> None:
    """How to reach a lab of several hypervisors: hvnet by name, ssh and ovs-vsctl with the lab's files."""
    st = lab.status()
    print(
        f"\nlab '{st['topology']}' is up: hosts {', '.join(hosts)}, reached over SSH (hvnet without --host: {hosts[0]})"
    )
    print(f"  {sys.argv[0]} --host {hosts[-1]} status")
    print(f"  {sys.argv[0]} hosts")
    print(f"  ssh -F {lab.run_dir / 'ssh_config'} {hosts[-1]} ovs-vsctl list-ports {bridge}")
    first = st["hosts"][hosts[0]]
    if first.get("kind") != "vm":  # a VM host's OVSDB socket is inside the VM: over SSH only
        print(f"  ovs-vsctl --db=unix:{first['ovs_rundir']}/db.sock show")


def cmd_lab_down(args: argparse.Namespace) -> int:
    report = Lab().down()
    if args.json:
        render.print_json(documents.LAB_DOWN.stamp({"actions": report.actions}))
    else:
        for action in report.actions or ["no lab here; nothing to do"]:
            print(f"  {action}")
    return EXIT_OK


def _vm_access_status(vm: dict[str, Any]) -> None:
    print(f"VM inventory: {vm['inventory'] or 'not written'}; ssh_config: {vm['ssh_config']}")
    for name, g in vm["guests"].items():
        reach = "reachable" if g.get("reachable") else "NOT reachable"
        print(f"  guest {name}: ssh {g['address']}:{g['port']} on {g['interface']}, {reach}")


def cmd_lab_status(args: argparse.Namespace) -> int:
    st = Lab().status(reach=True)
    if args.json:
        render.print_json(documents.LAB_STATUS.stamp(st))
    else:
        print(f"lab: {st['state']}" + (f" (topology {st['topology']})" if st["topology"] else ""))
        print(f"run directory: {st['run_dir']}")
        if st["db"]:
            print(f"HVNET_DB={st['db']}")
        for name, h in (st.get("hosts") or {}).items():
            if h.get("kind") == "vm":
                answers = "SSH answers" if h["ssh"] else "SSH does NOT answer"
                qemu = f"QEMU pid {h['qemu_pid']}" if h["qemu_pid"] else "QEMU not running"
                print(f"host {name} (VM, kernel datapath): ssh {h['address']}:{h['port']} over tap {h['tap']}, "
                      f"{qemu}, {answers}")  # fmt: skip
                continue
            print(f"host {name}: ssh {h['address']}:{h['port']}, namespace {h['netns']}, OVS in {h['ovs_rundir']}")
        for daemon, pid in st["daemons"].items():
            print(f"  {daemon}: {'pid ' + str(pid) if pid else 'not running'}")
        if st["vm_access"]:
            _vm_access_status(st["vm_access"])
        if st["guests"]:
            print(
                render.table(
                    ["GUEST", "RUNS IN", "VIF", "IP", "PRESENT"],
                    [
                        [
                            g["name"],
                            _runs_in(g),
                            g["vif"],
                            g["ip"],
                            "yes" if g["namespace_present"] and g["vif_present"] else "NO",
                        ]
                        for g in st["guests"]
                    ],
                )
            )
    return EXIT_OK if st["state"] == "up" else EXIT_FAILED


def cmd_lab_exec(args: argparse.Namespace) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise UsageError("no command given", hint="hvnet lab exec GUEST -- COMMAND [ARG...]")
    lab = Lab()
    guests = {g["name"]: g for g in lab.status()["guests"]}
    if args.guest not in guests:
        raise UsageError(f"the lab has no guest {args.guest!r}", hint="guests: " + (", ".join(guests) or "none"))
    sys.stdout.flush()
    # exec: the command's output streams and its exit status becomes ours.
    full = lab.exec_argv(args.guest, argv)
    os.execv(full[0], full)
    return EXIT_OK  # not reached


def cmd_lab_image(args: argparse.Namespace) -> int:
    """Build the probe guest image, or find it in the cache; say which, and how long it took."""
    from pathlib import Path

    from appliance.lab.vm.image import build_image

    image = build_image(Path(args.cache) if args.cache else None, force=args.force)
    if args.json:
        render.print_json(documents.LAB_IMAGE.stamp(image.to_json()))
        return EXIT_OK
    info = image.to_json()
    print(f"probe image {image.digest[:16]} ({'built' if image.built else 'cached'} in {image.seconds:.2f} s)")
    print(f"  kernel  {image.kernel}  {info['kernel_bytes'] / 1e6:.1f} MB  ({info['kernel_package']})")
    print(f"  initrd  {image.initrd}  {info['initrd_bytes'] / 1e6:.1f} MB")
    for note in image.notes:
        print(f"  note: {note}")
    return EXIT_OK
