"""What a run records about itself before its first step: versions, the host, its kernel, the endpoints.

Saved with the results (:class:`~appliance.netperf.store.records.Meta`), so a
report or a comparison made later knows what was measured where, without
the machine.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from appliance import __version__
from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.endpoints.topology import Topology
from appliance.netperf.define.pairs import Server
from appliance.netperf.run import path
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.preflight import Preflight
from appliance.netperf.run.rig import Rig, now
from appliance.netperf.store import results
from appliance.netperf.store.records import ClientInfo, Meta, ServerInfo, SuiteInfo, SuiteResult
from appliance.policy import PolicyEngine
from appliance.switch.host import Host


def new_doc(
    suite: SuiteInfo, topology: Topology, spec: Server, rig: Rig, engine: PolicyEngine, conn: Connection,
    pf: Preflight,
) -> SuiteResult:  # fmt: skip
    """The results of a run about to start: its meta filled in, no step yet, state "running".

    ``suite``: what the run records of its suite; ``topology`` and ``spec``: where its guests are and its
    server (the endpoints' kinds, a pool's chassis, the netserver's port)."""
    state = engine.snapshot()
    host = rig.host
    meta = Meta(
        hvnet_version=__version__,
        host=host.label or socket.gethostname(),
        kernel=kernel(host),
        ovs_version=state.ovs_version,
        datapath_types=sorted({b.datapath_type or "system" for b in state.bridges.values()}),
        netperf_version=pf.netperf_version,
        suite=suite,
        command=sys.argv,
        client=ClientInfo(rig.client.name, rig.client.address, rig.client.vif, runs_in(topology, rig.client)),
        server=ServerInfo(
            spec.guest,
            rig.address,
            spec.port,
            spec.managed,
            None if rig.server is None else runs_in(topology, rig.server),
        ),
        preflight={"warnings": pf.warnings, "facts": pf.facts},
        started=now(),
    )
    if topology.ovn:  # between chassis: which ones, the tunnel and the MTUs in play
        server_chassis = topology.guest(spec.guest).host if spec.guest else None
        meta.path = path.pool_path(conn, host.runner, host.local_runner, rig.client, rig.server, server_chassis)
    return SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "running", True, meta)


def runs_in(topology: Topology, ep: Endpoint) -> str:
    """qemu, netns, probe (a namespace hvnet added to the host's bridge for this run), or a real VM as
    ``vm-ssh`` / ``vm-agent`` (how hvnet reached it)."""
    if ep.guest is not None and ep.guest.access is not None:
        return f"vm-{ep.guest.access.method}"
    if ep.in_vm:
        return "qemu"
    kinds = {g.name: g.kind for g in topology.guests}
    return "probe" if kinds.get(ep.name) == "probe" else "netns"


def same_kernel(host: Host) -> bool:
    """Whether the host's switch runs on this machine's kernel (this machine, or a lab host in a
    namespace of it): only then are its cores and its ovs-vswitchd's threads this machine's /proc."""
    if host.label is None:
        return True
    boot_id = "/proc/sys/kernel/random/boot_id"
    try:
        here = Path(boot_id).read_text().strip()
        there = host.runner.read_text(boot_id)
    except (OSError, HvnetError):
        return False
    return there is not None and here == there.strip()


def kernel(host: Host) -> str:
    """The release of the kernel whose switch carries the run (a remote host's, over its runner)."""
    if host.label is None:
        return os.uname().release
    res = host.runner.run(["uname", "-r"], check=False, timeout=10)
    return res.stdout.strip() or "unknown"
