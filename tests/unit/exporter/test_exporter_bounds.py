"""The exporter's bounds, on real sockets and a real hang: an audit log that is a FIFO nobody writes
(opening it blocks until someone does) stands for any collection step that stops answering -- every scrape
still answers within the deadline, says it timed out, and starts no second collection; scrapes that
arrive together share one collection; connections past the limit are answered 503 at once."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.target import DbTarget
from appliance.exporter import server as exporter
from appliance.services import metrics, scrape
from appliance.switch.host import DataPaths, Host


def _collectors() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "hvnet-exporter-collect")


@pytest.fixture()
def stuck(tmp_path: Path) -> Iterator[tuple[scrape.Collector, Path]]:
    """A collector whose audit log is a FIFO with no writer: its collection hangs until the test writes."""
    paths = DataPaths.for_lab(tmp_path)
    os.mkfifo(paths.audit_log)
    host = Host(DbTarget(f"unix:{tmp_path}/db.sock", "--db"), paths=paths, label="hv1")
    collector = scrape.Collector(host, timeout=0.5, deadline=0.8)
    yield collector, paths.audit_log
    _release(paths.audit_log)


def _release(fifo: Path) -> None:
    """Open the FIFO for writing (without blocking: the reader is there) and close it: the reader sees EOF."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader waiting


def _values(fams: metrics.Families, name: str) -> dict[tuple[str, ...], float]:
    fam = fams.get(name)
    return dict(fam.samples) if fam is not None else {}


def test_a_hung_collection_is_answered_within_the_deadline_and_said(
    stuck: tuple[scrape.Collector, Path],
) -> None:
    collector, fifo = stuck
    for _ in range(3):  # the first waits for the deadline; the next ones answer at once
        started = time.monotonic()
        fams = collector.collect()
        assert time.monotonic() - started < 1.3
        assert _values(fams, "hvnet_up") == {("hv1",): 0.0}
        assert _values(fams, "hvnet_exporter_scrape_timed_out") == {("hv1",): 1.0}
        assert {f.name for f in fams} == {"hvnet_up", "hvnet_exporter_scrape_timed_out", "hvnet_exporter_scrapes_total",
                                          "hvnet_exporter_scrape_errors_total", "hvnet_exporter_scrape_duration_seconds"}  # fmt: skip
        assert _collectors() == 1  # never a second collection beside the hung one
    assert _values(fams, "hvnet_exporter_scrape_errors_total")[("hv1", "deadline")] == 3
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the hung open returns...
    fifo.unlink()
    fifo.write_text("")  # ...and the next collection reads a plain (empty) audit log
    os.close(writer)
    time.sleep(0.3)  # the hung collection returns: too old to export, dropped
    fams = collector.collect()
    assert _values(fams, "hvnet_exporter_scrape_timed_out") == {("hv1",): 0.0}
    assert _values(fams, "hvnet_exporter_scrape_errors_total")[("hv1", "ovsdb")] == 2  # the late one, this one
    assert _values(fams, "hvnet_exporter_scrapes_total") == {("hv1",): 4.0}


def test_scrapes_that_arrive_together_share_one_collection(stuck: tuple[scrape.Collector, Path]) -> None:
    collector, fifo = stuck
    collector.deadline = 5.0
    got: list[metrics.Families] = []
    scrapes = [threading.Thread(target=lambda: got.append(collector.collect())) for _ in range(5)]
    for t in scrapes:
        t.start()
    time.sleep(0.3)
    assert _collectors() == 1
    _release(fifo)
    for t in scrapes:
        t.join(5)
    assert len(got) == 5
    for fams in got:
        assert _values(fams, "hvnet_exporter_scrape_timed_out") == {("hv1",): 0.0}
        assert _values(fams, "hvnet_exporter_scrape_errors_total") == {("hv1", "ovsdb"): 1.0}  # one read for all


def test_connections_past_the_limit_are_answered_503_at_once(tmp_path: Path) -> None:
    host = Host(DbTarget(f"unix:{tmp_path}/db.sock", "--db"), paths=DataPaths.for_lab(tmp_path), label="hv1")
    server = exporter.Server(scrape.Collector(host, timeout=0.5), exporter.parse_listen("127.0.0.1:0"))
    idle = []
    try:
        with urllib.request.urlopen(server.url, timeout=5) as reply:
            assert b"\nhvnet_up 0.0\n" in reply.read()  # this machine's switch: no host label
        before = threading.active_count()
        for _ in range(exporter.MAX_CLIENTS):  # connected, saying nothing
            idle.append(socket.create_connection(("127.0.0.1", server.port)))
        time.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url, timeout=5)
        assert err.value.code == 503 and time.monotonic() - started < 1.0
        assert threading.active_count() <= before + exporter.MAX_CLIENTS
        for s in idle:
            s.close()
        idle.clear()
        time.sleep(0.3)
        with urllib.request.urlopen(server.url, timeout=5) as reply:
            assert reply.status == 200
    finally:
        for s in idle:
            s.close()
        server.close()
