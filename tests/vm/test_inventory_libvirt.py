"""Inventory through a real libvirt: a QEMU domain that libvirt itself plugs into OVS.

The domain has no kernel and no disk -- QEMU sits in its BIOS -- which is all
it takes for libvirt to add its ``vnetN`` ports (with ``vm-id`` and
``attached-mac``) to a private switch.  Everything is asked of the real
``hvnet status`` as an operator would run it; the domain, libvirt's daemons
(when started here) and the switch are removed whatever happens.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.lab.switch import Switch
from appliance.lab.vm import libvirtd
from tests.conftest import run_hvnet

pytestmark = pytest.mark.vm

NAME = "hvnet-inv-test"
NICS = {"52:54:00:4e:56:01": "virtio", "52:54:00:4e:56:02": "e1000"}
DOMAIN_XML = f"""<domain type='qemu'>
  <name>{NAME}</name>
  <memory unit='MiB'>64</memory>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    {
    "".join(
        f"<interface type='bridge'><source bridge='brv'/><virtualport type='openvswitch'/>"
        f"<vlan><tag id='5'/></vlan><mac address='{mac}'/><model type='{model}'/></interface>"
        for mac, model in NICS.items()
    )
}
  </devices>
  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>
</domain>
"""


def status(sw: Switch, *args: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], float]:
    """``hvnet status --json`` on the private switch: its VIFs by port, and how long it took."""
    started = time.monotonic()
    r = run_hvnet(*args, "--db", sw.remote, "status", "--json", env=env)
    elapsed = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert "libvirt" not in r.stderr.lower(), r.stderr  # an absent libvirt is not an error
    return {v["port"]: v for v in json.loads(r.stdout)["vifs"]}, elapsed


def _remove_domain(conn: Any, name: str) -> None:
    dom = next((d for d in conn.listAllDomains() if d.name() == name), None)
    if dom is None:
        return
    if dom.isActive():
        dom.destroy()
    if dom.isPersistent():
        dom.undefine()


def _libvirtd_elsewhere(sw: Switch) -> str | None:
    """Why the running libvirtd cannot plug a domain into ``sw``, if it cannot.

    A libvirtd started for another switch (another lab) runs ``ovs-vsctl``
    against its own ``$OVS_RUNDIR``: a domain created here would fail to plug.
    """
    for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "libvirtd":
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        rundir = next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"OVS_RUNDIR=")), None)
        if rundir is not None and Path(rundir).resolve() != sw.run_dir:
            return (
                f"libvirtd (pid {pid}) is running for the switch in {rundir}, not this test's; "
                "stop that lab ('hvnet lab down' with its HVNET_LAB_DIR) and run again"
            )
    return None


def test_inventory_shows_libvirt_domains(tmp_path: Path) -> None:
    why = libvirtd.available()
    if why:
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.fail("libvirt tests need root (libvirtd, QEMU as root, OVS daemons)")
    import libvirt

    # No lab's names, and libvirt found the default way unless a test says otherwise.
    env = {"HVNET_LAB_DIR": str(tmp_path / "no-lab"), "HVNET_LIBVIRT_URI": "", "LIBVIRT_DEFAULT_URI": ""}
    sw = Switch(tmp_path / "ovs")
    daemons = None
    conn = None
    try:
        sw.start()
        sw.vsctl("add-br", "brv", "--", "set", "bridge", "brv", "datapath_type=netdev")
        daemons = libvirtd.ensure(tmp_path, sw.run_dir)
        if "libvirtd" not in daemons.started and (elsewhere := _libvirtd_elsewhere(sw)):
            pytest.fail(elsewhere)
        conn = libvirt.open(libvirtd.URI)
        _remove_domain(conn, NAME)  # left over by an earlier run killed before its cleanup
        started = time.monotonic()
        dom = conn.createXML(DOMAIN_XML, 0)
        print(f"domain started in {time.monotonic() - started:.1f} s")

        vifs, elapsed = status(sw, env=env)
        print(f"status --json with libvirt: {elapsed:.2f} s")
        ours = {p: v for p, v in vifs.items() if v["vm_uuid"] == dom.UUIDString()}
        assert len(ours) == 2, vifs
        for port, v in ours.items():
            assert port.startswith("vnet")
            assert (v["vm_name"], v["vm_name_source"], v["vm_state"]) == (NAME, "libvirt", "running")
            assert v["vm_interface"] == f"{port} {NICS[v['mac']]} on brv"
            assert v["tag"] == 5

        text = run_hvnet("--db", sw.remote, "status", env=env)
        assert f"{NAME} (running)" in text.stdout, text.stdout

        dom.suspend()
        vifs, _ = status(sw, "--libvirt", libvirtd.URI, env=env)
        assert {v["vm_state"] for p, v in vifs.items() if p in ours} == {"paused"}

        for label, extra, option in (
            ("HVNET_LIBVIRT_URI=none", {"HVNET_LIBVIRT_URI": "none"}, ()),
            ("--libvirt none", {}, ("--libvirt", "none")),
            ("an unreachable URI", {"HVNET_LIBVIRT_URI": "qemu+unix:///system?socket=/nonexistent"}, ()),
        ):
            vifs, elapsed = status(sw, *option, env={**env, **extra})
            print(f"status --json with {label}: {elapsed:.2f} s")
            assert set(ours) <= set(vifs), label
            for port in ours:
                v = vifs[port]
                assert (v["vm_name"], v["vm_state"], v["vm_interface"]) == (None, None, None), label
                assert v["vm_uuid"] == dom.UUIDString() and v["mac"] in NICS
            assert elapsed < 2.0, f"{label}: {elapsed:.2f} s"

        dom.destroy()  # transient: gone from libvirt, and libvirt unplugs its ports
        vifs, _ = status(sw, env=env)
        assert not set(ours) & set(vifs), vifs
    finally:
        if conn is not None:
            try:
                _remove_domain(conn, NAME)
            finally:
                conn.close()
        if daemons is not None:
            libvirtd.release(daemons.started, daemons.linked, tmp_path)
        if sw.pid("ovs-vswitchd") is not None:  # a netdev bridge's tap outlives ovs-vswitchd otherwise
            sw.vsctl("--if-exists", "del-br", "brv", check=False)
        sw.stop()
