"""systemd's channels: journal priorities on stderr, sd_notify datagrams on a real AF_UNIX socket."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import systemd
from appliance.core.systemd import JournalFormatter, LevelFormatter, Notifier, notify, priority
from tests.conftest import ROOT


@pytest.fixture()
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """What systemd binds: a datagram socket named by $NOTIFY_SOCKET."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    try:
        yield sock
    finally:
        sock.close()


def received(sock: socket.socket) -> list[str]:
    out = []
    sock.settimeout(0.2)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except TimeoutError:
        return out


def record(level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord("hvnet.agent", level, __file__, 1, msg, None, None)


def test_levels_map_to_syslog_priorities() -> None:
    got = [priority(lv) for lv in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)]
    assert got == [7, 6, 4, 3, 2]


def test_journal_lines_carry_the_priority_and_no_timestamp() -> None:
    f = JournalFormatter("%(message)s")
    assert f.format(record(logging.WARNING, "vif1.0: gone")) == "<4>vif1.0: gone"
    # a message of several lines is several journal entries, each at its priority
    assert f.format(record(logging.ERROR, "one\ntwo")) == "<3>one\n<3>two"


def test_terminal_lines_keep_the_level() -> None:
    assert LevelFormatter("hvnet", False).format(record(logging.WARNING, "x")) == "hvnet: warning: x"
    line = LevelFormatter("hvnet-agent", True).format(record(logging.INFO, "agent started"))
    date, clock, rest = line.split(" ", 2)
    assert len(date) == 10 and clock[2] == ":" and rest == "hvnet-agent INFO agent started"


def test_notify_sends_one_datagram_of_lines(listener: socket.socket) -> None:
    assert notify("READY=1", "STATUS=enforcing")
    assert listener.recv(4096) == b"READY=1\nSTATUS=enforcing"


def test_notify_reaches_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"hvnet-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("WATCHDOG=1")
        assert sock.recv(100) == b"WATCHDOG=1"


def test_notify_without_a_manager_does_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not notify("READY=1")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert not notify("READY=1")  # never raises: the service outlives its manager's socket


def test_ready_is_sent_once_and_statuses_only_when_they_change(listener: socket.socket) -> None:
    n = Notifier()
    n.set_status("connecting")
    n.set_status("connecting")
    n.set_ready("enforcing p on s")
    n.set_ready("enforcing p on s")
    n.set_ready("enforcing p on s (1 re-applies)")
    n.stopping("stopping")
    assert received(listener) == [
        "STATUS=connecting",
        "READY=1\nSTATUS=enforcing p on s",
        "STATUS=enforcing p on s (1 re-applies)",
        "STOPPING=1\nSTATUS=stopping",
    ]


def test_the_watchdog_is_petted_at_half_its_period(listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = Notifier()
    assert n.interval == pytest.approx(0.1)
    end = time.monotonic() + 0.55
    while time.monotonic() < end:
        n.pet()
        time.sleep(min(0.01, n.due()))
    pets = received(listener)
    assert set(pets) == {"WATCHDOG=1"} and 5 <= len(pets) <= 7, pets


def test_no_watchdog_for_another_process_or_without_a_period(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for the parent, inherited by a child
    assert systemd.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "0")
    monkeypatch.delenv("WATCHDOG_PID")
    assert systemd.watchdog_interval() is None
    assert Notifier().due() == float("inf")


def _log_through(stderr: Path, journal_stream: str | None) -> str:
    """A real process logging a warning to ``stderr`` (a file), with $JOURNAL_STREAM as given."""
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    code = (
        "import logging; from appliance.core.systemd import log_handler; "
        "logging.basicConfig(level=logging.INFO, handlers=[log_handler('hvnet')]); "
        "logging.getLogger('hvnet').warning('vif3.0 carries every VLAN')"
    )
    with open(stderr, "w") as f:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, stderr=f, env=env, check=True, timeout=30)
    return stderr.read_text()


def test_stderr_is_recognised_as_the_journal_by_its_device_and_inode(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr"
    stderr.write_text("")
    st = stderr.stat()
    assert _log_through(stderr, f"{st.st_dev}:{st.st_ino}") == "<4>vif3.0 carries every VLAN\n"
    # another stream (stderr redirected by hand under a unit) or no journal: the terminal's form
    assert _log_through(stderr, f"{st.st_dev}:{st.st_ino + 1}") == "hvnet: warning: vif3.0 carries every VLAN\n"
    assert _log_through(stderr, None) == "hvnet: warning: vif3.0 carries every VLAN\n"
    assert _log_through(stderr, "garbage") == "hvnet: warning: vif3.0 carries every VLAN\n"
