"""sFlow and IPFIX collectors in the lab: pmacct's ``sfacctd`` and ``nfacctd``.

A collector listens on one address and port (on this machine's side, or in
a guest's namespace), and its print plugin writes what it received as JSON
lines every second: per source/destination/protocol, the packets and bytes
accounted.  For sFlow, pmacct counts each flow sample as one packet (the
sampled packet; renormalisation by the sampling rate is off), so the
packets it reports are the samples received; for IPFIX they are the
packets the exported flow records account for.

The collector is started like the netservers: by hvnet, through the
runner, stopped by the PID it started (SIGINT first, so pmacct writes what
it still holds, then whatever of its process tree is left), and
:meth:`Collector.__exit__` stops it even when the body fails.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.errors import LabError
from appliance.core.runner import CommandRunner, LocalRunner, in_netns
from appliance.netperf.run.launch import stop_tree

PROGRAMS = {"sflow": "sfacctd", "ipfix": "nfacctd"}
READY_TEXT = {"sflow": "waiting for sFlow data on", "ipfix": "waiting for NetFlow/IPFIX data on"}
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Received:
    """What a collector accounted: records written, packets (sFlow: samples) and bytes."""

    records: int = 0
    packets: int = 0
    bytes: int = 0


def free_udp_port() -> int:
    """A UDP port free on the loopback now (the kernel's pick), for a collector to listen on."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_text(kind: str, address: str, port: int, out: Path, pidfile: Path, log: Path) -> str:
    """pmacct's configuration: one print plugin, JSON lines appended every second."""
    prefix = "sfacctd" if kind == "sflow" else "nfacctd"
    return "\n".join(
        [
            "daemonize: false",
            f"{prefix}_ip: {address}",
            f"{prefix}_port: {port}",
            "plugins: print[c]",
            "aggregate[c]: src_host, dst_host, proto",
            "print_output[c]: json",
            f"print_output_file[c]: {out}",
            "print_output_file_append[c]: true",
            "print_refresh_time[c]: 1",
            f"pidfile: {pidfile}",
            f"logfile: {log}",
            "",
        ]
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a collector wrote (a line cut short by a write in progress is left out)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def tally(records: list[dict[str, Any]], **match: str) -> Received:
    """Sum of ``packets`` and ``bytes`` over the records whose fields equal ``match`` (e.g. ip_proto="icmp")."""
    chosen = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    return Received(
        len(chosen), sum(int(r.get("packets", 0)) for r in chosen), sum(int(r.get("bytes", 0)) for r in chosen)
    )


class Collector:
    """One pmacct collector hvnet started; ``with Collector(...) as c:`` stops it whatever happens."""

    def __init__(
        self,
        kind: str,
        address: str,
        port: int,
        run_dir: Path,
        *,
        netns: str | None = None,
        runner: CommandRunner | None = None,
    ) -> None:
        if kind not in PROGRAMS:
            raise ValueError(f"collector kind {kind!r}; known: {', '.join(PROGRAMS)}")
        self.kind, self.address, self.port, self.netns = kind, address, port, netns
        self.runner: CommandRunner = runner or LocalRunner()
        self.dir = run_dir
        self.out = run_dir / f"{PROGRAMS[kind]}-{port}.jsonl"
        self.log = run_dir / f"{PROGRAMS[kind]}-{port}.log"
        self.conf = run_dir / f"{PROGRAMS[kind]}-{port}.conf"
        self.pidfile = run_dir / f"{PROGRAMS[kind]}-{port}.pid"
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        """The collector as an sFlow/IPFIX target (``host:port``)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    def start(self) -> Collector:
        """Start it and wait until it listens (its log says so); LabError with the log's end if it does not."""
        program = self.runner.which(PROGRAMS[self.kind])
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(config_text(self.kind, self.address, self.port, self.out, self.pidfile, self.log))
        argv = [program, "-f", str(self.conf)]
        if self.netns:
            argv = in_netns(self.netns, argv)
        with open(self.dir / f"{PROGRAMS[self.kind]}-{self.port}.stderr", "ab") as err:
            self.popen = self.runner.popen(argv, stdout=err, stderr=err, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if READY_TEXT[self.kind] in self._log():
                return self
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        tail = "\n".join(self._log().splitlines()[-5:])
        self.stop()
        raise LabError(f"{PROGRAMS[self.kind]} did not start listening on {self.target}: {tail or 'no log'}")

    def _log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def received(self, **match: str) -> Received:
        """What it has written so far (every second, and once more when stopped)."""
        return tally(read_records(self.out), **match)

    def stop(self, grace: float = 5.0) -> None:
        """SIGINT (pmacct writes what it holds and exits), then end what is left of the processes it started."""
        popen, self.popen = self.popen, None
        if popen is not None:
            stop_tree(popen, grace, sig=signal.SIGINT, children_too=False)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
