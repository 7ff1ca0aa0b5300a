"""Which Open vSwitch release first has each feature hvnet uses (pure data and one question).

A XenServer or XCP-ng dom0 brings its own OVS, and hvnet does not choose it: XCP-ng 8.2 (and
Citrix Hypervisor 8.2) ship 2.5.3, XenServer 8 and XCP-ng 8.3 ship 2.17.7.  On a switch older
than a feature, hvnet refuses the request before it changes anything, naming the version it
found and the one needed, instead of sending a command the switch misreads or rejects halfway.

Every version below is the first release whose entry in OVS's ``NEWS`` names the feature (the
``source`` says which line); where ``NEWS`` is silent the reason is written out.  The version
compared is the ``Open_vSwitch`` row's ``ovs_version`` (what the distribution's ``ovs-ctl``
writes there at start, and the lab likewise); a switch that does not say its version is not
refused -- hvnet cannot tell, and every switch hvnet was built against is newer than any floor
here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """One feature: what it is called in a refusal, the first OVS release that has it, and why."""

    key: str
    what: str  # reads after "Open vSwitch X has no ..."
    since: tuple[int, int]
    source: str


FEATURES: dict[str, Feature] = {
    f.key: f
    for f in (
        Feature("ofctl-bundle", "ovs-ofctl bundle (flows and groups in one OpenFlow 1.3 transaction)", (2, 6),
                "NEWS 2.6.0: ovs-ofctl: New \"bundle\" command; OpenFlow 1.3 Extension 230 (bundles)"),
        Feature("ofctl-names", "ovs-ofctl --names/--no-names (the form hvnet reads flows and ports in)", (2, 8),
                "NEWS 2.8.0: ovs-ofctl can now accept and display port names ... use --names or --no-names"),
        Feature("packet-out", "packet-out in the field=value syntax, in bundles", (2, 8),
                "NEWS 2.7.0: new syntax for 'ovs-ofctl packet-out', 'bundle' supports packet-out; "
                "2.8.0 for ofproto/trace-packet-out and the trace output hvnet parses"),
        Feature("trace", "ofproto/trace output in the form hvnet parses (bridge(...) passes)", (2, 8),
                "NEWS 2.8.0: Tracing with ofproto/trace now traces through recirculation; 2.5's trace "
                "prints 'Bridge:/Rule:' blocks instead of the indented passes"),
        Feature("meter-kernel", "OpenFlow meters on the kernel datapath", (2, 10),
                "NEWS 2.10.0: Linux datapath: Added support for meters (and a 4.15+ kernel)"),
        Feature("meter-userspace", "OpenFlow meters on the userspace datapath", (2, 7),
                "NEWS 2.7.0: The \"meter\" action is now supported in the userspace datapath"),
        Feature("erspan", "ERSPAN tunnels", (2, 10),
                "NEWS 2.10.0: ERSPAN: Implemented ERSPAN protocol for both kernel and userspace datapath"),
        Feature("mirror-snaplen", "Mirror snaplen column", (2, 6),
                "the Mirror table's snaplen column arrived with 2.6.0's truncate support (NEWS 2.6.0: "
                "output(port=N,max_len=M), Linux: Support for truncate action)"),
    )
}  # fmt: skip

_VERSION = re.compile(r"^\s*v?([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,4}))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"2.5.3"`` (also ``"2.17.7-1.xcpng8.3"``, ``"2.5"``) -> (2, 5, 3); None for no version."""
    if not text:
        return None
    m = _VERSION.match(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def missing(key: str, ovs_version: str | None) -> str | None:
    """Why this switch cannot do ``key`` ("Open vSwitch 2.5.3 has no ERSPAN tunnels: it needs 2.10
    or later"), or None when it can or does not say its version."""
    feature = FEATURES[key]  # a KeyError here is a typo in hvnet, not a switch without the feature
    v = parse_version(ovs_version)
    if v is None or v[:2] >= feature.since:
        return None
    return f"Open vSwitch {ovs_version} has no {feature.what}: it needs {_dotted(feature.since)} or later"


def first_missing(keys: tuple[str, ...] | list[str], ovs_version: str | None) -> str | None:
    """The refusal for the first of ``keys`` this switch lacks (the newest floor first), or None."""
    for key in sorted(keys, key=lambda k: FEATURES[k].since, reverse=True):
        why = missing(key, ovs_version)
        if why is not None:
            return why
    return None


def meter_feature(datapath_type: str) -> str:
    """Which meter feature a bridge of this datapath needs (``netdev`` is the userspace one)."""
    return "meter-userspace" if datapath_type == "netdev" else "meter-kernel"


def _dotted(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"
