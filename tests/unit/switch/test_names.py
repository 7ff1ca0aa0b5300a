"""VM name sources: the order they are asked in and the default set.
XAPI has its own tests (test_names_xapi.py), libvirt too (test_names_libvirt.py)."""

from appliance.switch import names


def test_first_source_wins() -> None:
    first = names.StaticNames({"a": "from-libvirt"}, name="libvirt")
    second = names.StaticNames({"a": "from-lab", "b": "B"})
    assert names.resolve_names([first, second], ["a", "b"]) == {"a": ("from-libvirt", "libvirt"), "b": ("B", "lab")}


def test_libvirt_absence_is_handled() -> None:
    srcs = names.default_sources({"x": "y"}, {"HVNET_LIBVIRT_URI": "qemu:///system"})
    assert srcs[-1].name == "lab"
    if not names.LibvirtNames.available():
        assert [s.name for s in srcs] == ["lab"]
