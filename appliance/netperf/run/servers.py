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
from typing import Callable, Optional

from appliance.core.errors import HvnetError
from appliance.netperf.define.suite import Step, Suite
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run import pktgen
from appliance.netperf.run.launch import Netserver
from appliance.netperf.run.pktgen import Iperf3Servers
from appliance.netperf.run.preflight import PreflightFailed
from appliance.netperf.run.rig import Rig

REACH_S = 5.0  # how long the client may take to reach a netserver that was just started


class Servers:
    """The run's netserver (a managed server guest's) and iperf3 servers (packet-rate steps), once started."""

    def __init__(self, rig: Rig, suite: Suite, netserver_path: str) -> None:
        self.rig = rig
        self.suite = suite
        self.netserver_path = netserver_path  # the netserver preflight found
        self.netserver: Optional[Netserver] = None
        self.iperf3: Optional[Iperf3Servers] = None

    def start_netserver(self) -> Optional[Netserver]:
        """Start the server guest's netserver (None: the suite's server is not managed by hvnet)."""
        rig = self.rig
        if rig.server is not None:
            self.netserver = Netserver(rig.server, self.suite.server.port, rig.out_dir / "netserver.log",
                                       self.netserver_path, rig.server.runner_for(rig.host), host=rig.host)  # fmt: skip
            self.netserver.start()
        return self.netserver

    def await_netserver(self) -> None:
        """Return once the client reaches a netserver; PreflightFailed with the last answer otherwise."""
        deadline = time.monotonic() + REACH_S
        last = ""
        while time.monotonic() < deadline:
            code, out, err = self._probe()
            if code == 0 and "THROUGHPUT=" in out:
                self._check_ours()
                return
            last = (out + err).strip().splitlines()[0] if (out + err).strip() else f"exit {code}"
            if self.netserver is not None and not self.netserver.alive():
                break
            time.sleep(0.1)
        srv = self.suite.server
        where = f"{srv.guest} ({self.rig.address}:{srv.port})" if srv.managed else srv.describe()
        raise PreflightFailed([f"netserver on {where} cannot be reached from {self.rig.client.name}: {last}"])

    def _probe(self) -> tuple[int, str, str]:
        """One transaction from the client to the netserver: (exit status, stdout, stderr)."""
        rig = self.rig
        probe = omni.reachability_argv(rig.netperf, rig.address, self.suite.server.port)
        try:
            res = rig.client.runner_for(rig.host).run(rig.client.wrap(probe), check=False, timeout=10.0)
        except HvnetError as exc:  # no answer within the timeout
            return -1, "", str(exc)
        return res.returncode, res.stdout, res.stderr

    def _check_ours(self) -> None:
        """A netserver answers: refuse the run if it is not the one hvnet started (that one exited)."""
        if self.netserver is not None and not self.netserver.alive():
            raise PreflightFailed(
                [
                    f"the netserver hvnet started exited (port {self.suite.server.port} in use?), yet one "
                    "answers there: a netserver hvnet did not start; stop it or use another netserver_port"
                ]
            )

    def start_iperf3(self) -> Optional[str]:
        """iperf3's servers in the server guest, one per concurrent sender of the busiest packet-rate step;
        where they listen (None: none started)."""
        rig = self.rig
        if rig.server is not None:
            self.iperf3 = pktgen.servers_for(self.suite, rig.server, rig.iperf3, rig.out_dir,
                                             rig.server.runner_for(rig.host), rig.host)  # fmt: skip
        if self.iperf3 is None:
            return None
        self.iperf3.start()
        return f"{self.iperf3.count} iperf3 server(s) listen at {rig.address}:{iperf.DEFAULT_PORT}"

    def stop(self) -> None:
        if self.netserver is not None:
            self.netserver.stop()
        if self.iperf3 is not None:
            self.iperf3.stop()

    def receiver_pid(self, step: Step) -> Callable[[], Optional[int]]:
        """The receiving process whose CPU is sampled: the netserver, or for a packet-rate step with one
        sender its iperf3 server (several: which one served which sender is not known, so none)."""
        server = self.rig.server
        if server is not None and (server.in_vm or server.remote):
            return lambda: None  # a process in a VM is not a host process: its CPU is not sampled (not reported)
        if step.test.is_iperf:
            pids = self.iperf3.pids if self.iperf3 is not None else []
            return lambda: pids[0] if pids and step.concurrency == 1 else None
        return lambda: self.netserver.pid if self.netserver else None

    def notes(self) -> list[str]:
        """What the servers say of a repetition's figures: a netserver that died under it."""
        if self.netserver is not None and not self.netserver.alive():
            return [f"netserver (pid {self.netserver.pid}) is not running (exit {self.netserver.exit_status()})"]
        return []
