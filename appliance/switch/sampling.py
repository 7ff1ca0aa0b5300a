"""sFlow and IPFIX settings of a bridge: the stored columns, their grammar and their text.

One bridge has at most one ``sFlow`` row and one ``IPFIX`` row (the
Bridge's ``sflow`` and ``ipfix`` columns).  Both tables are not root
tables: a row no bridge references is deleted by ovsdb-server itself, so
taking sampling away is clearing the bridge's reference.

The same values are what a policy asks for (with ``external_ids`` left
empty) and what the switch has; the planner compares them with
:meth:`SflowCols.same_config`, ownership marks aside.  The grammar here is
shared by the policy file, the CLI's flags and the console, so the same
bad value is refused with the same words wherever it is typed.

Ranges.  ovs-vswitchd.conf.db(5) documents only defaults for sFlow
(sampling 1 in 400, polling every 30 s, 128 header bytes) and the schema
bounds none of them; the IPFIX columns are bounded by the schema.  hvnet's
bounds: sampling 1..2^32-1 (a rate of 0 is no sampling: clear it instead),
polling 1..3600 s (ovs-vswitchd treats 0 as "no counter polling", which
is not what a number asks for), header 14..600 bytes (one Ethernet header
at least; at most what ovs-vswitchd still sends: a sample must fit in its
sFlow datagram, and OVS 3.1 was measured sending the samples of 1442-byte
frames with a 612-byte header and dropping every one from 624 bytes on,
logging "flow sample too big for datagram"), IPFIX timeouts >= 0 with
``cache_active_timeout`` at most 4200 s (the schema's).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Union

from appliance.core.ovsdb import column as col
from appliance.core.ovsdb import opt
from appliance.core.validate import ifname

U32_MAX = 4294967295
SFLOW_KEYS = ("targets", "sampling", "polling", "header", "agent")
IPFIX_KEYS = ("targets", "sampling", "obs_domain_id", "obs_point_id", "cache_active_timeout", "cache_max_flows")
KINDS = ("sflow", "ipfix")
TITLES = {"sflow": "sFlow", "ipfix": "IPFIX"}
TABLES = {"sflow": "sFlow", "ipfix": "IPFIX"}  # OVSDB table of each kind

# field -> (minimum, maximum, what it is): the integer fields of each kind.
_RANGES: dict[str, dict[str, tuple[int, int, str]]] = {
    "sflow": {
        "sampling": (1, U32_MAX, "1 in N packets sampled"),
        "polling": (1, 3600, "seconds between counter samples"),
        "header": (14, 600, "bytes of each sampled packet sent"),
    },
    "ipfix": {
        "sampling": (1, U32_MAX, "1 in N packets sampled"),
        "obs_domain_id": (0, U32_MAX, "observation domain id"),
        "obs_point_id": (0, U32_MAX, "observation point id"),
        "cache_active_timeout": (0, 4200, "seconds a flow stays in the cache, 0 = no cache"),
        "cache_max_flows": (0, U32_MAX, "flows the cache holds, 0 = no cache"),
    },
}

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SflowCols:
    """An sFlow row: where samples go, 1 in ``sampling`` packets, counters every ``polling`` s."""

    targets: tuple[str, ...]
    sampling: int | None = None
    polling: int | None = None
    header: int | None = None
    agent: str | None = None
    external_ids: Pairs = ()

    kind = "sflow"

    def config(self) -> tuple[Any, ...]:
        return (tuple(sorted(self.targets)), self.sampling, self.polling, self.header, self.agent)

    def same_config(self, other: Any) -> bool:
        """Equal in everything ovs-vswitchd acts on (ownership marks aside)."""
        return isinstance(other, SflowCols) and self.config() == other.config()

    def fields(self) -> dict[str, Any]:
        """The settings as a policy writes them (unset ones left out)."""
        out: dict[str, Any] = {"targets": list(self.targets)}
        for k in SFLOW_KEYS[1:]:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    def describe(self) -> str:
        extra = [f"1-in-{self.sampling if self.sampling is not None else 400}"]
        extra.append(f"polling {self.polling if self.polling is not None else 30} s")
        extra.append(f"header {self.header if self.header is not None else 128} B")
        if self.agent:
            extra.append(f"agent {self.agent}")
        return f"sFlow to {', '.join(self.targets)} " + " ".join(extra)


@dataclass(frozen=True)
class IpfixCols:
    """A bridge's IPFIX row (``other_config`` is kept as found: hvnet does not set it)."""

    targets: tuple[str, ...]
    sampling: int | None = None
    obs_domain_id: int | None = None
    obs_point_id: int | None = None
    cache_active_timeout: int | None = None
    cache_max_flows: int | None = None
    other_config: Pairs = ()
    external_ids: Pairs = ()

    kind = "ipfix"

    def config(self) -> tuple[Any, ...]:
        return (tuple(sorted(self.targets)), *(getattr(self, k) for k in IPFIX_KEYS[1:]))

    def same_config(self, other: Any) -> bool:
        return isinstance(other, IpfixCols) and self.config() == other.config()

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"targets": list(self.targets)}
        for k in IPFIX_KEYS[1:]:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    def describe(self) -> str:
        extra = [f"1-in-{self.sampling if self.sampling is not None else 400}"]
        cache = (self.cache_active_timeout, self.cache_max_flows)
        if 0 in cache:
            extra.append("no flow cache")
        elif cache != (None, None):
            extra.append(f"cache {self.cache_active_timeout or '-'} s/{self.cache_max_flows or '-'} flows")
        if self.obs_domain_id is not None or self.obs_point_id is not None:
            extra.append(f"domain {self.obs_domain_id or 0} point {self.obs_point_id or 0}")
        return f"IPFIX to {', '.join(self.targets)} " + " ".join(extra)


SamplingCols = Union[SflowCols, IpfixCols]


class SamplingFieldError(ValueError):
    """Bad values of some fields: ``problems`` is (field, message) for each, in field order."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {m}" for f, m in problems))
        self.problems = problems


def target(value: Any) -> str:
    """One collector as ``host:port``: IPv4, ``[IPv6]`` or a DNS name, port 1..65535."""
    text = value if isinstance(value, str) else None
    if text is None or ":" not in text:
        raise ValueError(f"{value!r} is not host:port (e.g. 192.0.2.9:6343, [2001:db8::9]:6343, collector:6343)")
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text}: the port must be a number 1..65535")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"{text}: {host} is not an IPv6 address") from None
    elif re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"{text}: {host} is not an IPv4 address") from None
    elif ":" in host:
        raise ValueError(f"{text}: write an IPv6 collector in brackets, [{host}]:{port}")
    elif not _HOSTNAME.match(host):
        raise ValueError(f"{text}: {host!r} is neither an IP address nor a host name")
    return f"{host}:{int(port)}"


def _targets(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError("required: one or more collectors as host:port (a list, or one string)")
    out = tuple(target(v) for v in items)
    if len(set(out)) != len(out):
        raise ValueError("a collector is listed twice")
    return out


def _integer(kind: str, key: str, value: Any) -> int:
    low, high, what = _RANGES[kind][key]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"must be an integer {low}..{high} ({what}), not {value!r}")
    return value


def _agent(value: Any) -> str:
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
    try:
        return ifname(value)
    except ValueError:
        raise ValueError(
            f"must be an interface name or an IP address (the address collectors see), not {value!r}"
        ) from None


def from_fields(kind: str, values: dict[str, Any]) -> SamplingCols:
    """The row ``values`` ask for (unknown keys are the caller's business); every bad field at once."""
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    keys = SFLOW_KEYS if kind == "sflow" else IPFIX_KEYS
    for key in keys:
        if key not in values or (values[key] is None and key != "targets"):
            continue
        try:
            if key == "targets":
                out[key] = _targets(values[key])
            elif key == "agent":
                out[key] = _agent(values[key])
            else:
                out[key] = _integer(kind, key, values[key])
        except ValueError as exc:
            problems.append((key, str(exc)))
    if "targets" not in values and not any(f == "targets" for f, _ in problems):
        problems.insert(0, ("targets", "required: one or more collectors as host:port"))
    if problems:
        raise SamplingFieldError(problems)
    return SflowCols(**out) if kind == "sflow" else IpfixCols(**out)


def describe(value: SamplingCols | None, kind: str) -> str:
    return value.describe() if value is not None else f"{TITLES[kind]} off"


def _pairs(mapping: dict[str, str]) -> Pairs:
    return tuple(sorted(mapping.items()))


def read(kind: str, bridge: Any) -> SamplingCols | None:
    """The bridge row's sFlow or IPFIX settings, as stored (the one reader of these rows).

    The switch's shared walk (:mod:`appliance.switch.reader`) reads them here for the
    inventory (``hvnet status``) and the policy engine alike.
    """
    row = opt(col(bridge, kind))
    if row is None:
        return None
    targets = tuple(sorted(col(row, "targets")))
    if kind == "sflow":
        return SflowCols(
            targets,
            *(opt(col(row, k)) for k in SFLOW_KEYS[1:]),
            external_ids=_pairs(col(row, "external_ids")),
        )
    return IpfixCols(
        targets,
        *(opt(col(row, k)) for k in IPFIX_KEYS[1:]),
        other_config=_pairs(col(row, "other_config")),
        external_ids=_pairs(col(row, "external_ids")),
    )


# Columns of the two tables, for the readers' registrations.
OVSDB_COLUMNS: dict[str, list[str]] = {
    "sFlow": [*SFLOW_KEYS, "external_ids"],
    "IPFIX": [*IPFIX_KEYS, "other_config", "external_ids"],
}
