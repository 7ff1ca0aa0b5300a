"""Names from the switch reach Prometheus intact: VIF, VM, bridge and mirror names holding every control
character (C0, DEL, C1), quotes, backslashes and lone surrogates go through the exporter's families and
prometheus-client's exposition, and prometheus-client's own text parser reads back the same label values
-- with the one documented replacement: a lone surrogate (not encodable as UTF-8) becomes U+FFFD."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.exporter import server as exporter
from appliance.services import metrics

CONTROLS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]
HOSTILE = [*CONTROLS, '"', "\\", "{", "}", "=", ",", " ", "é", "\u2028", "\U0001f600", "\ud800", "\udfff", "\udc80"]
# lists joined, not st.text: text() merges its alphabet into one codec-bound set and drops the surrogates
names = st.lists(st.sampled_from(HOSTILE) | st.characters(blacklist_categories=("Cs",)), max_size=24).map("".join)


class _One:
    """Stands where the Collector does: one scrape's families, given."""

    host_label = True  # every label the exporter can show

    def __init__(self, fams: metrics.Families) -> None:
        self.fams = fams

    def collect(self) -> Iterator[metrics.Family]:
        return iter(self.fams)


def _expected(text: str) -> str:
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _exposed(fams: metrics.Families) -> dict[str, list[dict[str, str]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter._Families(_One(fams)))  # type: ignore[arg-type]
    text = generate_latest(registry).decode("utf-8")  # valid UTF-8, or this raises
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s.labels)
    return out


@settings(max_examples=300, deadline=None)
@given(bridge=names, vif=names, vm=names, mirror=names, output=names)
def test_hostile_names_are_read_back_as_they_were(bridge: str, vif: str, vm: str, mirror: str, output: str) -> None:
    fams = metrics.Families()
    fams.add("hvnet_vif_info", ("hv1", vif, bridge, vm, vm, "10", "02:00:00:00:00:01"), 1)
    fams.add("hvnet_vif_rx_bytes_total", ("hv1", vif), 42)
    fams.add("hvnet_vif_link_up", ("hv1", vif), 1)
    fams.add("hvnet_mirror_tx_packets_total", ("hv1", bridge, mirror, output), 7)
    got = _exposed(fams)
    want_vif = {"host": "hv1", "vif": _expected(vif)}
    assert got["hvnet_vif_info"] == [{**want_vif, "bridge": _expected(bridge), "vm": _expected(vm),
                                      "vm_uuid": _expected(vm), "vlan": "10", "mac": "02:00:00:00:00:01"}]  # fmt: skip
    assert got["hvnet_vif_rx_bytes_total"] == [want_vif]
    assert got["hvnet_vif_link_up"] == [want_vif]
    want_mirror = {"host": "hv1", "bridge": _expected(bridge), "mirror": _expected(mirror), "output": _expected(output)}
    assert got["hvnet_mirror_tx_packets_total"] == [want_mirror]


def test_every_control_character_at_once() -> None:
    name = "".join(CONTROLS) + "\ud800tail"
    fams = metrics.Families()
    fams.add("hvnet_vif_info", ("hv1", name, "br0", name, "", "1", ""), 1)
    (labels,) = _exposed(fams)["hvnet_vif_info"]
    assert labels["vif"] == labels["vm"] == "".join(CONTROLS) + "\ufffdtail"
