"""Rates from counters.  Values are real readings of vif1.0 in the lab
(/sys/class/net/vif1.0/statistics, 1 s apart, ping + TCP_RR running)."""

from appliance.switch.counters import Counters, RateMeter, rate_between, read_kernel

T0 = Counters(rx_bytes=872713, rx_packets=13015, tx_bytes=873475, tx_packets=13014, source="kernel")
T1 = Counters(rx_bytes=1745426, rx_packets=26030, tx_bytes=1746950, tx_packets=26028, source="kernel")


def test_rate_between_real_readings() -> None:
    r = rate_between(T0, 100.0, T1, 101.0)
    assert r is not None
    assert r.rx_bps == (1745426 - 872713) * 8
    assert r.tx_pps == 26028 - 13014
    assert r.interval_s == 1.0


def test_counter_reset_gives_no_rate() -> None:
    # the interface was re-created (a hypervisor re-plug): counters restart at 0
    assert rate_between(T1, 0.0, T0, 1.0) is None


def test_missing_counters_or_time_give_no_rate() -> None:
    assert rate_between(Counters(), 0.0, T1, 1.0) is None
    assert rate_between(T0, 1.0, T1, 1.0) is None


def test_meter_needs_two_readings_of_the_same_source() -> None:
    m = RateMeter()
    assert m.update("vif1.0", 0.0, T0) is None
    assert m.update("vif1.0", 2.0, T1).rx_pps == (26030 - 13015) / 2
    ovsdb = Counters(rx_bytes=1, rx_packets=1, tx_bytes=1, tx_packets=1, source="ovsdb")
    assert m.update("vif1.0", 3.0, ovsdb) is None  # switching source is not comparable
    m.forget_missing(set())
    assert m.update("vif1.0", 4.0, T1) is None


def test_read_kernel_from_a_sysfs_tree(tmp_path) -> None:
    stats = tmp_path / "vif9.0" / "statistics"
    stats.mkdir(parents=True)
    for i, name in enumerate(
        ["rx_bytes", "rx_packets", "rx_dropped", "rx_errors", "tx_bytes", "tx_packets", "tx_dropped", "tx_errors"]
    ):
        (stats / name).write_text(f"{i * 10}\n")
    c = read_kernel("vif9.0", root=str(tmp_path))
    assert c is not None and c.source == "kernel" and c.tx_bytes == 40 and c.tx_errors == 70
    assert read_kernel("absent0", root=str(tmp_path)) is None


def test_counters_read_as_a_remote_host_reads_them() -> None:
    """The one-command script a host over SSH runs, run here by sh: the same counters as read locally."""
    from appliance.core.runner import LocalRunner
    from appliance.switch import counters

    class AsIfRemote(LocalRunner):
        local = False

    found = counters.read_kernel_many(AsIfRemote(), ["lo", "no-such-if", "a b; $(id)"])
    assert set(found) == {"lo"} and found["lo"].source == "kernel"
    here = counters.read_kernel("lo")
    assert here is not None and found["lo"].rx_packets <= here.rx_packets


def test_local_counters_are_read_only_for_kernel_devices(tmp_path, monkeypatch) -> None:
    """A port that is no kernel device (a netdev datapath's) is passed over without trying its files."""
    from appliance.core.runner import LocalRunner
    from appliance.switch import counters

    stats = tmp_path / "vif1.0" / "statistics"
    stats.mkdir(parents=True)
    for i, name in enumerate(counters.COUNTER_NAMES):
        (stats / name).write_text(f"{i}\n")
    (tmp_path / "vif2.0").mkdir()  # a device whose counters cannot be read: left out as before
    tried = []
    real = counters.read_kernel
    monkeypatch.setattr(counters, "SYSFS_NET", str(tmp_path))
    monkeypatch.setattr(counters, "read_kernel", lambda name, root: tried.append(name) or real(name, root))
    found = counters.read_kernel_many(LocalRunner(), ["vif1.0", "vif2.0", "dpdk0", "../vif1.0/.."])
    assert set(found) == {"vif1.0"} and found["vif1.0"].tx_bytes == counters.COUNTER_NAMES.index("tx_bytes")
    assert tried == ["vif1.0", "vif2.0"]


def test_counters_as_a_dict_in_the_order_of_their_fields() -> None:
    from dataclasses import fields

    c = Counters(rx_bytes=1, tx_errors=8, source="kernel")
    assert list(c.as_dict()) == [f.name for f in fields(Counters) if f.name != "source"]
    assert c.as_dict()["rx_bytes"] == 1 and c.as_dict()["tx_errors"] == 8 and c.as_dict()["rx_packets"] is None
