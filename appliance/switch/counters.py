"""Interface counters and the rates derived from them.

OVS refreshes ``Interface.statistics`` only every 5 s by default, which is too
coarse for a live view.  For interfaces that exist in the host's network
namespace the kernel's own counters (``/sys/class/net/IF/statistics``) are
read instead: they are exact, cheap and current.  Rates come from two
successive reads; :class:`RateMeter` is pure so it is tested on its own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.core.runner import CommandRunner

SYSFS_NET = "/sys/class/net"

COUNTER_NAMES = (
    "rx_bytes",
    "rx_packets",
    "rx_dropped",
    "rx_errors",
    "tx_bytes",
    "tx_packets",
    "tx_dropped",
    "tx_errors",
)


@dataclass(frozen=True)
class Counters:
    """Cumulative counters, from the VIF's point of view on the switch.

    ``rx`` is what the switch received from the VM (the VM's transmit),
    ``tx`` what the switch sent to it.  ``None`` means "not reported".
    """

    rx_bytes: int | None = None
    rx_packets: int | None = None
    rx_dropped: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_packets: int | None = None
    tx_dropped: int | None = None
    tx_errors: int | None = None
    source: str = "none"  # "kernel", "ovsdb" or "none"

    @classmethod
    def from_mapping(cls, values: dict[str, int], source: str) -> Counters:
        return cls(**{k: int(values[k]) for k in COUNTER_NAMES if k in values}, source=source)

    def as_dict(self) -> dict[str, int | None]:
        """The counters by name, in :data:`COUNTER_NAMES`' order (the fields' own; ``status --json``
        asks a thousand times, and ``fields()`` builds its tuple anew each time)."""
        return {name: getattr(self, name) for name in COUNTER_NAMES}


def read_kernel(ifname: str, root: str = SYSFS_NET) -> Counters | None:
    """Kernel counters of ``ifname`` in this network namespace, or None."""
    base = os.path.join(root, ifname, "statistics")
    values: dict[str, int] = {}
    for name in COUNTER_NAMES:
        try:
            with open(os.path.join(base, name), "rb") as fh:
                values[name] = int(fh.read())
        except (OSError, ValueError):
            return None
    return Counters.from_mapping(values, "kernel")


@dataclass(frozen=True)
class Rates:
    """Rates between two counter readings (bit/s and packet/s)."""

    rx_bps: float
    tx_bps: float
    rx_pps: float
    tx_pps: float
    interval_s: float


def rate_between(old: Counters, old_t: float, new: Counters, new_t: float) -> Rates | None:
    """Rates from two readings, or None when they cannot be compared.

    A counter that went backwards (interface re-created, counters reset) or a
    reading without the counters makes the interval unusable rather than
    producing a huge or negative rate.
    """
    dt = new_t - old_t
    if dt <= 0:
        return None
    deltas = {}
    for name in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"):
        a, b = getattr(old, name), getattr(new, name)
        if a is None or b is None or b < a:
            return None
        deltas[name] = b - a
    return Rates(
        rx_bps=deltas["rx_bytes"] * 8 / dt,
        tx_bps=deltas["tx_bytes"] * 8 / dt,
        rx_pps=deltas["rx_packets"] / dt,
        tx_pps=deltas["tx_packets"] / dt,
        interval_s=dt,
    )


class RateMeter:
    """Keeps the previous reading per key and yields rates on each update."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, Counters]] = {}

    def update(self, key: str, t: float, counters: Counters) -> Rates | None:
        prev = self._last.get(key)
        self._last[key] = (t, counters)
        if prev is None or prev[1].source != counters.source:
            return None
        return rate_between(prev[1], prev[0], counters, t)

    def forget_missing(self, keys: set[str]) -> None:
        """Drop state of keys no longer present (ports that went away)."""
        for key in list(self._last):
            if key not in keys:
                del self._last[key]


_OFCTL_PORT = re.compile(r'^\s*port\s+(?:"([^"]+)"|(\S+)):\s*rx\s+(.*)$')
_OFCTL_TX = re.compile(r"^\s*tx\s+(.*)$")


def parse_ofctl_ports(text: str) -> dict[str, Counters]:
    """``ovs-ofctl --names dump-ports BRIDGE`` -> counters per port name, as OVS itself counted them.

    Unlike the kernel's counters these include what the switch dropped (a
    full socket buffer towards a VIF, a meter) -- the drops a step must show.
    """
    out: dict[str, Counters] = {}
    name: str | None = None
    values: dict[str, int] = {}

    def fields_of(rest: str, prefix: str) -> None:
        for part in rest.split(","):
            key, _, value = part.strip().partition("=")
            target = {"pkts": "packets", "bytes": "bytes", "drop": "dropped", "errs": "errors"}.get(key)
            if target and re.fullmatch(r"[0-9]{1,20}", value.strip()):  # not '²' (isdigit, yet no int)
                values[f"{prefix}_{target}"] = int(value)

    for line in text.splitlines():
        m = _OFCTL_PORT.match(line)
        if m:
            name = m.group(1) or m.group(2).rstrip(":")
            values = {}
            fields_of(m.group(3), "rx")
            continue
        t = _OFCTL_TX.match(line)
        if t and name is not None:
            fields_of(t.group(1), "tx")
            out[name] = Counters.from_mapping(values, "openflow")
            name = None
    return out


# Runs on the host with the interface names as its arguments (data, never code): keeps the
# statistics directories that exist (shell builtins only), then one grep prints every
# counter of all of them as "PATH:VALUE" -- one process, not one per counter.
_READ_MANY = (
    'for i; do shift; [ -d "/sys/class/net/$i/statistics" ] && set -- "$@" "/sys/class/net/$i/statistics"; done; '
    '[ "$#" -eq 0 ] || exec grep -r -H "" -- "$@"'
)


def read_kernel_many(runner: CommandRunner, ifnames: list[str]) -> dict[str, Counters]:
    """Kernel counters of ``ifnames`` on the runner's host (one command for all of them when remote)."""
    if runner.local:
        # One listing first: a port that is no kernel device (a netdev or DPDK datapath's, a VIF whose
        # domain is gone) costs no failed opens -- a thousand of them on such a switch.
        try:
            devices: set[str] | None = set(os.listdir(SYSFS_NET))
        except OSError:
            devices = None
        found = {n: read_kernel(n, SYSFS_NET) for n in ifnames if devices is None or n in devices}
        return {n: c for n, c in found.items() if c is not None}
    if not ifnames:
        return {}
    res = runner.run(["sh", "-c", _READ_MANY, "sh", *ifnames], check=False, timeout=30)
    return parse_kernel_many(res.stdout)


def parse_kernel_many(text: str) -> dict[str, Counters]:
    """Counters from ``grep -r -H "" /sys/class/net/IF/statistics`` output (what :data:`_READ_MANY` prints)."""
    values: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        path, _, value = line.rpartition(":")
        parts = path.split("/")  # "", sys, class, net, IFNAME, statistics, COUNTER
        if len(parts) == 7 and parts[6] in COUNTER_NAMES and value.isascii() and value.isdigit():
            values.setdefault(parts[4], {})[parts[6]] = value
    return {n: Counters.from_mapping(v, "kernel") for n, v in values.items() if len(v) == len(COUNTER_NAMES)}
