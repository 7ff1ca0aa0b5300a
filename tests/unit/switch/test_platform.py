"""The dom0 detector on inventory files as XenServer's installer writes them (tests/unit/data/dom0/README.md)."""

from __future__ import annotations

from pathlib import Path

from appliance.switch import platform
from appliance.switch.platform import Platform, detect, parse_inventory, parse_release

DATA = Path(__file__).resolve().parents[1] / "data" / "dom0"


class FileRunner:
    """A host's files, as the runner's ``read_text`` gives them (None: not there)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.asked: list[str] = []

    def read_text(self, path: str) -> str | None:
        self.asked.append(path)
        return self.files.get(path)


def test_a_captured_xenserver_7_inventory_is_a_dom0() -> None:
    text = (DATA / "xensource-inventory-xenserver-7.0").read_text()
    inv = parse_inventory(text)
    assert inv["INSTALLATION_UUID"] == "3f113c86-3bc6-4c22-bcf9-af1d78b2080a"
    assert inv["COMPANY_NAME"] == "Citrix Systems, Inc."  # quotes gone, commas and spaces kept
    assert inv["INSTALLATION_DATE"] == "2016-07-28 20:26:59.820624"
    assert detect(text, None) == Platform("XenServer", "7.0.0", True, "125380c")


def test_xcp_ng_8_2_1() -> None:
    text = (DATA / "xensource-inventory-xcp-ng-8.2.1").read_text()
    p = detect(text, "CentOS Linux release 7.9.2009 (Core)\n")  # /etc/redhat-release is CentOS's there
    assert p == Platform("XCP-ng", "8.2.1", True, "release/yangtze/master/58")
    assert p.text() == "XCP-ng 8.2.1 (dom0)"
    assert p.to_json() == {"product": "XCP-ng", "version": "8.2.1", "dom0": True, "build": "release/yangtze/master/58"}


def test_an_inventory_without_both_uuids_is_not_a_dom0() -> None:
    # what a hand-made xapi install on Debian writes (no product keys), less its control domain
    text = "CURRENT_INTERFACES='xenbr0'\nBUILD_NUMBER='0'\nINSTALLATION_UUID='1234'\n"
    assert detect(text, None).dom0 is False
    assert detect(text + "CONTROL_DOMAIN_UUID='5678'\n", None).dom0 is True


def test_a_kvm_host_is_its_release_file_and_not_a_dom0() -> None:
    p = detect(None, "Rocky Linux release 9.4 (Blue Onyx)\n")
    assert p == Platform("Rocky Linux", "9.4", False)
    assert detect(None, None) == Platform(None, None, False)
    assert detect("", "") == Platform(None, None, False)


def test_hostile_lines_are_skipped_not_trusted() -> None:
    text = "garbage\n# comment\nlower='x'\nPRODUCT_BRAND='XCP-ng'\nPRODUCT_VERSION=\n=oops\n\x00\n"
    assert parse_inventory(text) == {"PRODUCT_BRAND": "XCP-ng", "PRODUCT_VERSION": ""}
    assert detect(text, None) == Platform("XCP-ng", None, False)
    assert parse_release("not a release file") == (None, None)


def test_read_asks_the_hosts_files_in_order() -> None:
    runner = FileRunner(
        {
            platform.INVENTORY: (DATA / "xensource-inventory-xcp-ng-8.2.1").read_text(),
            "/etc/redhat-release": "CentOS Linux release 7.9.2009 (Core)\n",
        }
    )
    p = platform.read(runner)  # type: ignore[arg-type]
    assert p.product == "XCP-ng" and p.dom0
    assert runner.asked[:3] == list(platform.RELEASE_FILES) and runner.asked[-1] == platform.INVENTORY
