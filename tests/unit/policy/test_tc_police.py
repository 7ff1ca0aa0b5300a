"""tc's police counters and htb qdisc read from real outputs of the lab's kernel-datapath VM host
(tests/unit/data/tc-kernel-datapath.md says how they were captured), and the probe's cache."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from appliance.policy.apply import tcpolice
from appliance.policy.apply.enforcement import tc_police_evidence
from appliance.policy.apply.tcpolice import Htb, Police, parse_htb, parse_police

DATA = Path(__file__).parents[1] / "data"


def data(name: str) -> str:
    return (DATA / name).read_text()


def test_the_police_action_ovs_installed_and_its_counters_after_traffic_beyond_the_rate() -> None:
    (police,) = parse_police(data("tc-filter-matchall-police-after.txt"))
    assert police == Police("matchall", 10240, 131072, packets=16333, dropped=1105, overlimits=1105)
    assert police.passed == 15228
    assert police.describe() == (
        "tc police (matchall) rate 10240 kbit/s burst 131072 B: 15228 packets passed, 1105 dropped (policed)"
    )


def test_a_police_action_no_packet_reached_says_so() -> None:
    (police,) = parse_police(data("tc-filter-matchall-police-never-hit.txt"))
    assert (police.rate_kbit, police.packets, police.dropped) == (10240, 0, 0)
    assert police.describe().endswith(": installed, never hit")


def test_the_json_of_this_iproute2_has_the_counters_but_not_the_rate_so_the_text_is_read() -> None:
    (action,) = [a for f in json.loads(data("tc-filter-matchall-police-after.json")) for a in
                 f.get("options", {}).get("actions", [])]  # fmt: skip
    (police,) = parse_police(data("tc-filter-matchall-police-after.txt"))
    assert (action["stats"]["packets"], action["stats"]["drops"]) == (police.packets, police.dropped)
    assert action["kind"] == "police" and not {"rate", "burst"} & set(action)


def test_a_basic_classifier_and_other_rate_units_parse_too() -> None:
    text = (
        "filter parent ffff: protocol all pref 49 basic chain 0 handle 0x1\n"
        "\taction order 1:  police 0x2 rate 1Mbit burst 1000b mtu 64Kb action drop overhead 0b\n"
        "\tref 1 bind 1\n"
        "\tAction statistics:\n"
        "\tSent 0 bytes 7 pkt (dropped 3, overlimits 3 requeues 0)\n"
    )
    assert parse_police(text) == (Police("basic", 1000, 1000, 7, 3, 3),)


def test_no_ingress_filter_is_no_police_action() -> None:
    assert parse_police("") == ()
    assert parse_police(data("tc-qdisc-ingress-only.txt")) == ()


def test_the_htb_qdisc_ovs_installed_and_how_often_it_held_packets_back() -> None:
    assert parse_htb(data("tc-qdisc-htb.txt")) == Htb("1:", packets=15231, dropped=0, overlimits=14938)
    assert parse_htb(data("tc-qdisc-ingress-only.txt")) is None


def test_the_htb_root_class_says_the_rate_the_kernel_shapes_to() -> None:
    """``tc -s qdisc`` then ``tc -s class`` on the VM host after 10 s of TCP and UDP through 10240 kbit/s."""
    text = data("tc-qdisc-class-htb-vmhost.txt")
    assert parse_htb(text) == Htb("1:", packets=17635, dropped=0, overlimits=17435)  # the qdisc's, not a class's
    assert tcpolice.parse_htb_rate_kbit(text) == 10240  # the root class 1:fffe, not the queue's 12Kbit min-rate
    assert tcpolice.parse_htb_rate_kbit(data("tc-qdisc-htb.txt")) is None  # no class lines: nothing said
    assert tcpolice.parse_htb_rate_kbit("class htb 1:fffe root rate 1Gbit ceil 1Gbit burst 1375b") == 1_000_000


def test_the_evidence_says_policed_installed_never_hit_wrong_rate_or_not_verified() -> None:
    after = parse_police(data("tc-filter-matchall-police-after.txt"))
    assert tc_police_evidence(after, 10240) == (True, after[0].describe())
    never = parse_police(data("tc-filter-matchall-police-never-hit.txt"))
    ok, detail = tc_police_evidence(never, 10240)
    assert ok is True and "installed, never hit" in detail
    ok, detail = tc_police_evidence(after, 20000)
    assert ok is False and detail.startswith("NOT enforced as configured: 20000 kbit/s configured, installed tc police")
    assert tc_police_evidence((), 10240)[0] is False
    ok, detail = tc_police_evidence(None, 10240)
    assert ok is None and "10240 kbit/s configured, enforcement not verified" in detail


# -- the probe and its cache ------------------------------------------------------------------------


class Runner:
    """A remote host's runner answering from ``answer(argv)``, recording every command."""

    local = False

    def __init__(self, answer: Callable[[Sequence[str]], int], boot_id: str = "b00t-1", release: str = "6.1.0") -> None:
        self.host, self.boot_id, self.release, self.answer = "kvm1", boot_id, release, answer
        self.ran: list[list[str]] = []

    def which_optional(self, program: str) -> str | None:
        return f"/usr/sbin/{program}"

    def read_text(self, path: str) -> str | None:
        return f"{self.boot_id}\n" if path == tcpolice.BOOT_ID else None

    def run(self, argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.ran.append(list(argv))
        if list(argv) == ["uname", "-r"]:
            return subprocess.CompletedProcess(argv, 0, f"{self.release}\n", "")
        return subprocess.CompletedProcess(argv, self.answer(argv), "", "")


def kernel_without_police(argv: Sequence[str]) -> int:
    return 2 if "police" in argv else 0


def netns_refused(argv: Sequence[str]) -> int:
    return 1 if argv[:3] == ["ip", "netns", "add"] else 0


def test_the_probe_installs_what_ovs_installs_and_caches_per_host_kernel_and_boot(tmp_path: Path) -> None:
    r = Runner(lambda argv: 0)
    assert tcpolice.tc_police_works(r, tmp_path) is True  # type: ignore[arg-type]
    (filt,) = [a for a in r.ran if "filter" in a]
    assert filt[filt.index("prio") - 2 :][:7] == ["protocol", "all", "prio", "1", "matchall", "action", "police"]
    assert [p.name for p in tmp_path.iterdir()] == ["tc-police-kvm1-6.1.0-b00t-1"]
    assert r.ran[-1][:3] == ["ip", "netns", "del"]


def test_a_failure_to_set_the_probe_up_is_no_for_now_and_not_cached(tmp_path: Path) -> None:
    assert tcpolice.tc_police_works(Runner(netns_refused), tmp_path) is False  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    assert tcpolice.tc_police_works(Runner(lambda argv: 0), tmp_path) is True  # type: ignore[arg-type]


def test_a_lost_connection_mid_probe_is_not_the_kernels_answer(tmp_path: Path) -> None:
    r = Runner(lambda argv: 255 if argv[0] == "tc" else 0)
    assert tcpolice.tc_police_works(r, tmp_path) is False  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_kernels_no_is_cached_for_its_boot_only(tmp_path: Path) -> None:
    assert tcpolice.tc_police_works(Runner(kernel_without_police), tmp_path) is False  # type: ignore[arg-type]
    assert (tmp_path / "tc-police-kvm1-6.1.0-b00t-1").read_text() == "no\n"
    again = Runner(lambda argv: 0)
    assert tcpolice.tc_police_works(again, tmp_path) is False  # type: ignore[arg-type]
    assert not any("filter" in a for a in again.ran)  # answered from the cache
    rebooted = Runner(lambda argv: 0, boot_id="b00t-2")
    assert tcpolice.tc_police_works(rebooted, tmp_path) is True  # type: ignore[arg-type]
    other_kernel = Runner(kernel_without_police, release="6.12.0")
    assert tcpolice.tc_police_works(other_kernel, tmp_path) is False  # type: ignore[arg-type]
    assert any("filter" in a for a in other_kernel.ran)


def test_a_host_that_cannot_say_its_boot_is_probed_every_time(tmp_path: Path) -> None:
    r = Runner(lambda argv: 0, boot_id="")
    assert tcpolice.tc_police_works(r, tmp_path) is True  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["kvm1;rm -rf /", "../../etc/x"])
def test_a_hostile_host_name_stays_one_file_in_the_cache_directory(tmp_path: Path, name: str) -> None:
    r = Runner(lambda argv: 0)
    r.host = name
    assert tcpolice.tc_police_works(r, tmp_path) is True  # type: ignore[arg-type]
    (f,) = tmp_path.iterdir()
    assert f.parent == tmp_path and "/" not in f.name and ";" not in f.name


def test_the_answer_says_whether_it_is_the_kernels_and_where_it_is_kept(tmp_path: Path) -> None:
    kept = tcpolice.tc_police(Runner(kernel_without_police), tmp_path)  # type: ignore[arg-type]
    assert (kept.works, kept.cached, kept.why) == (False, tmp_path / "tc-police-kvm1-6.1.0-b00t-1", "")
    for_now = tcpolice.tc_police(Runner(netns_refused), tmp_path / "other")  # type: ignore[arg-type]
    assert (for_now.works, for_now.cached) == (False, None) and "could not be set up" in for_now.why
    blocked = tmp_path / "file"
    blocked.write_text("")  # the cache directory cannot be made under a file
    unkept = tcpolice.tc_police(Runner(lambda argv: 0), blocked / "cache")  # type: ignore[arg-type]
    assert (unkept.works, unkept.cached) == (True, None) and "could not be written" in unkept.why
