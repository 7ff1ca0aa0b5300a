"""The processes that answer a run's instances: the netserver hvnet starts, and iperf3's servers.

A managed server guest gets a netserver for the whole run; the client then
has to reach it (one TCP_RR transaction, within :data:`REACH_S`) before the
first case is set up, so a firewall or a port in use fails the run with
its reason, not every instance of the first step.  Packet-rate steps need
iperf3's servers (see :mod:`.pktgen`).  Both are stopped by PID when the run
ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from appliance.core.errors import HvnetError
from appliance.netperf.define.pairs import Server
from appliance.netperf.define.suite import Step
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run import pktgen
from appliance.netperf.run.launch import Endpoint, Netserver
from appliance.netperf.run.pktgen import Iperf3Servers
from appliance.netperf.run.preflight import PreflightFailed
from appliance.netperf.run.rig import Rig

REACH_S = 5.0  # how long the client may take to reach a netserver that was just started


class Servers:
    """The run's netservers (a managed server guest's, once per guest however many pairs it serves) and
    iperf3 servers (packet-rate and many-flows steps), once started."""

    def __init__(self, rig: Rig, spec: Server, iperf_concurrency: int, netserver_path: str) -> None:
        self.rig = rig
        self.spec = spec  # the suite's server: its guest (or address) and netserver port
        self.iperf_concurrency = iperf_concurrency  # the busiest iperf3 step's, per pair (0: no iperf3 test)
        self.netserver_path = netserver_path  # the netserver preflight found
        self.netserver: Optional[Netserver] = None  # the server's (the first pair's)
        self.others: dict[str, Netserver] = {}  # the other pairs' server guests', by name
        self.iperf3: Optional[Iperf3Servers] = None
        self.other_iperf3: list[Iperf3Servers] = []

    def _other_servers(self) -> dict[str, Endpoint]:
        """The pairs' server guests other than the first pair's, each once."""
        first = self.rig.server.name if self.rig.server is not None else None
        return {p.server.name: p.server for p in self.rig.pairs if p.server.name != first}

    def start_netserver(self) -> Optional[Netserver]:
        """Start the server guest's netserver, and each other pair's server's (None: the suite's server is
        not managed by hvnet)."""
        rig = self.rig
        if rig.server is not None:
            self.netserver = self._netserver(rig.server, rig.out_dir / "netserver.log")
        for name, ep in self._other_servers().items():
            self.others[name] = self._netserver(ep, rig.out_dir / f"netserver-{name}.log")
        return self.netserver

    def _netserver(self, server: Endpoint, log: Path) -> Netserver:
        rig = self.rig
        ns = Netserver(server, self.spec.port, log, self.netserver_path, server.runner_for(rig.host),
                       host=rig.host)  # fmt: skip
        ns.start()
        return ns

    def await_netserver(self) -> None:
        """Return once every client reaches its netserver; PreflightFailed with the last answer otherwise."""
        if not self.rig.pairs:
            self._await(self.rig.client, self.rig.address, self.netserver)
            return
        for p in self.rig.pairs:
            self._await(p.client, p.address, self.others.get(p.server.name, self.netserver), p.server.name)

    def _await(self, client: Endpoint, address: str, netserver: Optional[Netserver], guest: str = "") -> None:
        deadline = time.monotonic() + REACH_S
        last = ""
        while time.monotonic() < deadline:
            code, out, err = self._probe(client, address)
            if code == 0 and "THROUGHPUT=" in out:
                self._check_ours(netserver)
                return
            last = (out + err).strip().splitlines()[0] if (out + err).strip() else f"exit {code}"
            if netserver is not None and not netserver.alive():
                break
            time.sleep(0.1)
        srv = self.spec
        where = f"{guest or srv.guest} ({address}:{srv.port})" if srv.managed else srv.describe()
        raise PreflightFailed([f"netserver on {where} cannot be reached from {client.name}: {last}"])

    def _probe(self, client: Endpoint, address: str) -> tuple[int, str, str]:
        """One transaction from the client to the netserver: (exit status, stdout, stderr)."""
        rig = self.rig
        probe = omni.reachability_argv(rig.netperf, address, self.spec.port)
        try:
            res = client.runner_for(rig.host).run(client.wrap(probe), check=False, timeout=10.0)
        except HvnetError as exc:  # no answer within the timeout
            return -1, "", str(exc)
        return res.returncode, res.stdout, res.stderr

    def _check_ours(self, netserver: Optional[Netserver]) -> None:
        """A netserver answers: refuse the run if it is not the one hvnet started (that one exited)."""
        if netserver is not None and not netserver.alive():
            raise PreflightFailed(
                [
                    f"the netserver hvnet started exited (port {self.spec.port} in use?), yet one "
                    "answers there: a netserver hvnet did not start; stop it or use another netserver_port"
                ]
            )

    def start_iperf3(self) -> Optional[str]:
        """iperf3's servers in each server guest, one per concurrent sender of the busiest iperf3 step and
        pair it serves; where they listen (None: none started)."""
        rig = self.rig
        if rig.server is not None:
            self.iperf3 = self._iperf3(rig.server, rig.out_dir)
        for name, ep in self._other_servers().items():
            found = self._iperf3(ep, rig.out_dir / f"iperf3-{name}")
            self.other_iperf3 += [found] if found is not None else []
        if self.iperf3 is None:
            return None
        said = []
        for servers in [self.iperf3, *self.other_iperf3]:
            servers.start()
            said.append(f"{servers.count} iperf3 server(s) listen at {servers.endpoint.address}:{iperf.DEFAULT_PORT}")
        return "; ".join(said)

    def _iperf3(self, server: Endpoint, log_dir: Path) -> Optional[Iperf3Servers]:
        """``server``'s iperf3 servers: enough for every pair it serves (None: no iperf3 test)."""
        senders = sum(p.server.name == server.name for p in self.rig.pairs) or 1
        found = pktgen.servers_for(self.iperf_concurrency, server, self.rig.iperf3, log_dir,
                                   server.runner_for(self.rig.host), self.rig.host, senders=senders)  # fmt: skip
        if found is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        return found

    def stop(self) -> None:
        for ns in [self.netserver, *self.others.values()]:
            if ns is not None:
                ns.stop()
        for servers in [self.iperf3, *self.other_iperf3]:
            if servers is not None:
                servers.stop()

    def receiver_pid(self, step: Step) -> Callable[[], Optional[int]]:
        """The receiving process whose CPU is sampled: the netserver, or for a packet-rate step with one
        sender its iperf3 server (several: which one served which sender is not known, so none; several
        server guests: none is the receiver)."""
        server = self.rig.server
        if server is not None and (server.in_vm or server.remote):
            return lambda: None  # a process in a VM is not a host process: its CPU is not sampled (not reported)
        if self.others:
            return lambda: None
        if step.test.is_iperf:
            pids = self.iperf3.pids if self.iperf3 is not None else []
            senders = step.concurrency * max(1, len(self.rig.pairs))
            return lambda: pids[0] if pids and senders == 1 else None
        return lambda: self.netserver.pid if self.netserver else None

    def pids(self) -> list[int]:
        """The servers hvnet started on this machine: every netserver (its children, forked per connection,
        inherit its CPUs) and iperf3 server."""
        netservers = [self.netserver, *self.others.values()]
        out = [ns.pid for ns in netservers if ns is not None and ns.pid is not None]
        return out + [pid for s in [self.iperf3, *self.other_iperf3] if s is not None for pid in s.pids]

    def notes(self) -> list[str]:
        """What the servers say of a repetition's figures: a netserver that died under it."""
        out = []
        for name, ns in [(self.spec.guest, self.netserver), *self.others.items()]:
            if ns is not None and not ns.alive():
                where = f" in {name}" if self.others else ""
                out.append(f"netserver{where} (pid {ns.pid}) is not running (exit {ns.exit_status()})")
        return out
