"""systemd's two channels to a service: the journal on stderr, and sd_notify.

**Logging.**  Under systemd a service's stderr is a stream into journald,
which stamps every line with its own time and, unless told otherwise, logs it
at priority 6 (info).  A line that starts with ``<N>`` (syslog priority 0-7)
is logged at that priority instead (``SyslogLevelPrefix=``, on by default),
so ``journalctl -p warning`` finds hvnet's warnings.  systemd says the stream
is the journal by setting ``$JOURNAL_STREAM`` to stderr's ``device:inode``:
hvnet then writes ``<N>message`` with no timestamp of its own.  Anywhere else
(a terminal, a file, a pipe) a line keeps the level as a word, and the agent
its timestamp.

**Notification.**  A ``Type=notify`` unit waits for ``READY=1`` before it
counts the service as started, shows the last ``STATUS=`` line in
``systemctl status`` and, with ``WatchdogSec=``, kills a service that has not
sent ``WATCHDOG=1`` for that long.  The protocol is one datagram of
``KEY=value`` lines to the AF_UNIX socket in ``$NOTIFY_SOCKET`` (a leading
``@`` names an abstract socket): a few lines here rather than a dependency.
Without ``$NOTIFY_SOCKET`` (not under systemd) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import TextIO

# logging's levels -> syslog priorities (sd-daemon.h: SD_ERR 3, SD_WARNING 4, SD_INFO 6, SD_DEBUG 7)
_PRIORITY = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def priority(levelno: int) -> int:
    """The syslog priority journald files a record of this logging level under."""
    for level, prio in _PRIORITY:
        if levelno >= level:
            return prio
    return 7


def stream_is_journal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr) is the journal stream systemd connected ($JOURNAL_STREAM)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


class JournalFormatter(logging.Formatter):
    """``<N>`` and the message: journald adds the time, the unit and the program's name."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        # a record of several lines is several journal entries: each keeps the priority
        return "\n".join(prefix + line for line in super().format(record).splitlines() or [""])


class LevelFormatter(logging.Formatter):
    """``hvnet: warning: message`` for a person at a terminal; with timestamps (the agent writing to a
    file) ``TIME hvnet-agent WARNING message``."""

    def __init__(self, prog: str, timestamps: bool) -> None:
        fmt = f"%(asctime)s {prog} %(levelname)s %(message)s" if timestamps else f"{prog}: %(level_word)s: %(message)s"
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        record.level_word = record.levelname.lower()
        return super().format(record)


def log_handler(prog: str, *, timestamps: bool = False, stream: TextIO | None = None) -> logging.Handler:
    """A stderr handler in the journal's form under systemd, else ``prog: level: message``."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    if stream_is_journal(stream):
        handler.setFormatter(JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(LevelFormatter(prog, timestamps))
    return handler


# -- sd_notify ----------------------------------------------------------------------------


def notify(*lines: str) -> bool:
    """Send ``KEY=value`` lines to systemd; False when not under a notify-aware manager or it failed.

    Never raises: a service must not die because its manager stopped listening.
    """
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address or not lines:
        return False
    if address[0] == "@":
        address = "\0" + address[1:]
    elif address[0] != "/":
        return False  # vsock and other forms: not hvnet's case
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(lines).encode("utf-8", "replace"))
        return True
    except OSError:
        return False


def watchdog_interval() -> float | None:
    """Seconds between watchdog pets (half of ``WatchdogSec=``), or None when no watchdog watches us."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6


class Notifier:
    """What a long-running service tells systemd: readiness once, watchdog pets, status changes."""

    def __init__(self) -> None:
        self.ready = False
        self.status = ""
        self.interval = watchdog_interval()
        self._pet_at = 0.0

    def set_ready(self, status: str) -> None:
        """READY=1 the first time, with the status; later calls only update the status."""
        if not self.ready:
            self.ready = True
            self.status = status
            notify("READY=1", f"STATUS={status}")
        else:
            self.set_status(status)

    def set_status(self, status: str) -> None:
        """STATUS= when it changed (``systemctl status`` shows the last one)."""
        if status != self.status:
            self.status = status
            notify(f"STATUS={status}")

    def stopping(self, status: str) -> None:
        notify("STOPPING=1", f"STATUS={status}")

    def pet(self) -> None:
        """WATCHDOG=1, at most once per interval: called from the service's loop, so only a live loop pets."""
        if self.interval is None:
            return
        now = time.monotonic()
        if now >= self._pet_at:
            notify("WATCHDOG=1")
            self._pet_at = now + self.interval

    def due(self) -> float:
        """Seconds until the next pet is due (a loop waits no longer than this); inf without a watchdog."""
        if self.interval is None:
            return float("inf")
        return max(0.0, self._pet_at - time.monotonic())
