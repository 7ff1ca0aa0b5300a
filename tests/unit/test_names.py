"""VM name sources.  XAPI is exercised against a local XML-RPC server speaking
the same three calls (XAPI itself only exists on XenServer hosts)."""

import threading
from xmlrpc.server import SimpleXMLRPCServer

import pytest

from appliance import names


@pytest.fixture()
def xapi_url():
    vms = {"0f9c-uuid-1": ("OpaqueRef:1", "web-01")}
    server = SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False, allow_none=True)

    def login(user, password, version, originator):
        if (user, password) != ("root", "secret"):
            return {"Status": "Failure", "ErrorDescription": ["SESSION_AUTHENTICATION_FAILED"]}
        return {"Status": "Success", "Value": "OpaqueRef:session"}

    def get_by_uuid(session, vm_uuid):
        if vm_uuid in vms:
            return {"Status": "Success", "Value": vms[vm_uuid][0]}
        return {"Status": "Failure", "ErrorDescription": ["UUID_INVALID", "VM", vm_uuid]}

    def get_name_label(session, ref):
        return {"Status": "Success", "Value": next(n for r, n in vms.values() if r == ref)}

    server.register_function(login, "session.login_with_password")
    server.register_function(lambda s: {"Status": "Success", "Value": ""}, "session.logout")
    server.register_function(get_by_uuid, "VM.get_by_uuid")
    server.register_function(get_name_label, "VM.get_name_label")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_xapi_names(xapi_url) -> None:
    src = names.XapiNames(xapi_url, "root", "secret")
    assert src.lookup(["0f9c-uuid-1", "unknown"]) == {"0f9c-uuid-1": "web-01"}


def test_xapi_bad_credentials_give_no_names(xapi_url) -> None:
    assert names.XapiNames(xapi_url, "root", "wrong").lookup(["0f9c-uuid-1"]) == {}


def test_xapi_from_env(tmp_path, xapi_url) -> None:
    cred = tmp_path / "cred"
    cred.write_text("root:secret\n")
    src = names.XapiNames.from_env({"HVNET_XAPI_URL": xapi_url, "HVNET_XAPI_CREDENTIALS": str(cred)})
    assert src is not None and src.lookup(["0f9c-uuid-1"]) == {"0f9c-uuid-1": "web-01"}
    assert names.XapiNames.from_env({}) is None


def test_unreachable_xapi_is_skipped() -> None:
    src = names.XapiNames("http://127.0.0.1:9", "u", "p")
    lab = names.StaticNames({"a": "VM-A"})
    assert names.resolve_names([src, lab], ["a", "b"]) == {"a": ("VM-A", "lab")}


def test_first_source_wins() -> None:
    first = names.StaticNames({"a": "from-libvirt"}, name="libvirt")
    second = names.StaticNames({"a": "from-lab", "b": "B"})
    assert names.resolve_names([first, second], ["a", "b"]) == {"a": ("from-libvirt", "libvirt"), "b": ("B", "lab")}


def test_libvirt_absence_is_handled() -> None:
    srcs = names.default_sources({"x": "y"}, {"HVNET_LIBVIRT_URI": "qemu:///system"})
    assert srcs[-1].name == "lab"
    if not names.LibvirtNames.available():
        assert [s.name for s in srcs] == ["lab"]
