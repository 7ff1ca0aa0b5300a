"""VM names from XAPI, against a local XML-RPC server that answers the session
and VM calls the way XAPI does (XAPI itself only exists on XenServer hosts):
every result is ``{"Status": "Success", "Value": ...}`` or
``{"Status": "Failure", "ErrorDescription": [...]}``."""

from __future__ import annotations

import collections
import logging
import re
import socket
import ssl
import threading
import time
from typing import Any
from xmlrpc.server import SimpleXMLRPCServer

import pytest

from appliance.switch import names
from appliance.switch import xapi as xapi_mod

WEB = "0f9c-uuid-1"
DB = "7a1e-uuid-2"
TEMPLATE = "d0d0-uuid-t"
TIMEOUT = 0.5
MARGIN = 0.5  # scheduling on a loaded host; a stalled lookup would take far longer


def ok(value: Any) -> dict[str, Any]:
    return {"Status": "Success", "Value": value}


def failure(*description: str) -> dict[str, Any]:
    return {"Status": "Failure", "ErrorDescription": list(description)}


class FakeXapi:
    """Sessions, ``VM.get_all_records(_where)`` and the per-VM getters; every call counted."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.users = {"root": "secret"}
        self.vms = {
            "OpaqueRef:vm-1": {"uuid": WEB, "name_label": "web-01", "is_a_template": False, "power_state": "Running"},
            "OpaqueRef:vm-2": {"uuid": DB, "name_label": "db-01", "is_a_template": False, "power_state": "Halted"},
            "OpaqueRef:tpl": {
                "uuid": TEMPLATE,
                "name_label": "Debian 12",
                "is_a_template": True,
                "power_state": "Halted",
            },
        }
        self.sessions: set[str] = set()
        self.keep_sessions = True  # False: every session is invalid as soon as it is made
        self.calls: collections.Counter[str] = collections.Counter()
        self.hang = threading.Event()  # set: the VM calls do not answer until released
        self.release = threading.Event()
        self.server = SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False, allow_none=True)
        self.server.register_instance(self)
        self.scheme = "http"
        if tls is not None:  # XAPI's https: every accepted connection does the TLS handshake first
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def logins(self) -> int:
        return self.calls["session.login_with_password"]

    def expire_sessions(self) -> None:
        """What a toolstack restart does: every session is gone."""
        self.sessions.clear()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- XML-RPC --------------------------------------------------------------------

    def _dispatch(self, method: str, params: tuple[Any, ...]) -> dict[str, Any]:
        self.calls[method] += 1
        if method == "session.login_with_password":
            user, password, _version, _originator = params
            if self.users.get(user) != password:
                return failure("SESSION_AUTHENTICATION_FAILED", user, "Authentication failure")
            ref = f"OpaqueRef:session-{self.calls[method]}"
            if self.keep_sessions:
                self.sessions.add(ref)
            return ok(ref)
        session, *args = params
        if session not in self.sessions:
            return failure("SESSION_INVALID", str(session))
        if method == "session.logout":
            self.sessions.discard(session)
            return ok("")
        if method.startswith("VM.") and self.hang.is_set():
            self.release.wait(30)
        if method == "VM.get_all_records":
            return ok(self.vms)
        if method == "VM.get_all_records_where":
            m = re.fullmatch(r'field "(\w+)" = "(\w+)"', args[0])
            if not m:
                return failure("INTERNAL_ERROR", f"cannot parse {args[0]!r}")
            field, value = m.groups()
            return ok({r: v for r, v in self.vms.items() if str(v.get(field)).lower() == value})
        if method == "VM.get_by_uuid":
            ref = next((r for r, v in self.vms.items() if v["uuid"] == args[0]), None)
            return ok(ref) if ref else failure("UUID_INVALID", "VM", args[0])
        if method == "VM.get_name_label":
            return ok(self.vms[args[0]]["name_label"])
        return failure("MESSAGE_METHOD_UNKNOWN", method)


class HungServer:
    """Accepts connections and never answers: a wedged XAPI."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone would not
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(2)
        for c in self.conns:
            c.close()


@pytest.fixture()
def xapi():
    server = FakeXapi()
    yield server
    server.close()


@pytest.fixture()
def xapi_url(xapi):
    return xapi.url


@pytest.fixture()
def hung():
    server = HungServer()
    yield server
    server.close()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "hvnet.names" and r.levelno >= logging.WARNING]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- names, and the calls they take -----------------------------------------------------


def test_xapi_names(xapi_url) -> None:
    src = xapi_mod.XapiNames(xapi_url, "root", "secret")
    assert src.lookup(["0f9c-uuid-1", "unknown"]) == {"0f9c-uuid-1": "web-01"}


def test_one_login_and_one_call_per_lookup(xapi) -> None:
    src = xapi_mod.XapiNames(xapi.url, "root", "secret")
    for _ in range(3):
        assert src.lookup([WEB, DB, TEMPLATE]) == {WEB: "web-01", DB: "db-01"}  # templates are not VMs
    assert xapi.logins() == 1
    assert xapi.calls["VM.get_all_records_where"] == 3
    assert xapi.calls["VM.get_by_uuid"] == xapi.calls["VM.get_name_label"] == 0
    assert xapi.calls["session.logout"] == 0
    assert len(xapi.sessions) == 1
    assert src.lookup([]) == {} and xapi.calls["VM.get_all_records_where"] == 3  # nothing asked: no call
    src.close()
    assert xapi.calls["session.logout"] == 1 and not xapi.sessions


def test_session_expiry_logs_in_once_more(xapi, caplog) -> None:
    src = xapi_mod.XapiNames(xapi.url, "root", "secret")
    assert src.lookup([WEB]) == {WEB: "web-01"}
    xapi.expire_sessions()
    assert src.lookup([WEB]) == {WEB: "web-01"}
    assert xapi.logins() == 2
    assert xapi.calls["VM.get_all_records_where"] == 3  # refused once (SESSION_INVALID), then answered
    assert src.lookup([DB]) == {DB: "db-01"} and xapi.logins() == 2
    assert warnings_of(caplog) == []


def test_session_that_stays_invalid_is_a_failure(xapi, caplog) -> None:
    """XenAPI logs in again on each SESSION_INVALID and gives up after three tries; then
    the lookup fails like any other (one warning, no new try for retry_s)."""
    xapi.keep_sessions = False
    src = xapi_mod.XapiNames(xapi.url, "root", "secret")
    assert src.lookup([WEB]) == {}
    logins = xapi.logins()
    assert 2 <= logins <= 4
    assert src.lookup([WEB]) == {} and xapi.logins() == logins
    assert len(warnings_of(caplog)) == 1 and "fault" in warnings_of(caplog)[0]
    xapi.keep_sessions = True
    src.retry_s = 0
    assert src.lookup([WEB]) == {WEB: "web-01"}  # a fresh login, not the dead session's


# -- configuration ----------------------------------------------------------------------


def test_xapi_from_env(tmp_path, xapi_url) -> None:
    cred = tmp_path / "cred"
    cred.write_text("root:secret\n")
    src = xapi_mod.XapiNames.from_env({"HVNET_XAPI_URL": xapi_url, "HVNET_XAPI_CREDENTIALS": str(cred)})
    assert src is not None and src.lookup(["0f9c-uuid-1"]) == {"0f9c-uuid-1": "web-01"}
    assert xapi_mod.XapiNames.from_env({}) is None


def test_xapi_config_from_env(caplog) -> None:
    env = {"HVNET_XAPI_URL": "https://pool", "HVNET_XAPI_CREDENTIALS": "/etc/hvnet/xapi"}
    assert xapi_mod.XapiConfig.from_env(env) == xapi_mod.XapiConfig("https://pool", "/etc/hvnet/xapi", 3.0)
    assert xapi_mod.XapiConfig.from_env({**env, "HVNET_XAPI_TIMEOUT": "1.5"}).timeout == 1.5
    assert xapi_mod.XapiConfig.from_env({**env, "HVNET_XAPI_TIMEOUT": "soon"}).timeout == 3.0
    assert xapi_mod.XapiConfig.from_env({**env, "HVNET_XAPI_TIMEOUT": "-1"}).timeout == 3.0
    assert len(warnings_of(caplog)) == 2 and "HVNET_XAPI_TIMEOUT" in warnings_of(caplog)[0]
    assert xapi_mod.XapiConfig.from_env({"HVNET_XAPI_URL": "https://pool"}) is None
    assert xapi_mod.XapiConfig.from_env({"HVNET_XAPI_CREDENTIALS": "/etc/hvnet/xapi"}) is None


def test_one_session_per_configuration(tmp_path, xapi) -> None:
    """Inventory asks for its name sources on every read: they share one session."""
    cred = tmp_path / "cred"
    cred.write_text("root:secret\n")
    env = {"HVNET_XAPI_URL": xapi.url, "HVNET_XAPI_CREDENTIALS": str(cred)}
    first = [s for s in names.default_sources(None, env, "none") if s.name == "xapi"]
    second = [s for s in names.default_sources({"x": "y"}, env, "none") if s.name == "xapi"]
    assert len(first) == 1 and first[0] is second[0]
    explicit = names.default_sources(None, {}, "none", xapi=xapi_mod.XapiConfig(xapi.url, str(cred)))
    assert [s.name for s in explicit] == ["xapi"] and explicit[0] is first[0]
    for srcs in (first, second, explicit):
        assert names.resolve_names(srcs, [WEB]) == {WEB: ("web-01", "xapi")}
    assert xapi.logins() == 1
    assert [s.name for s in names.default_sources({"x": "y"}, {}, "none")] == ["lab"]


def test_changed_password_is_read_at_the_next_login(tmp_path, xapi, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hvnet.names")
    cred = tmp_path / "cred"
    cred.write_text("root:old\n")
    src = xapi_mod.XapiNames(xapi.url, credentials_file=str(cred), retry_s=0)
    assert src.lookup([WEB]) == {}
    assert any("authentication failed for user 'root'" in w for w in warnings_of(caplog))
    cred.write_text("root:secret\n")
    assert src.lookup([WEB]) == {WEB: "web-01"}
    assert "answers again" in caplog.records[-1].getMessage()


def test_unreadable_credentials_are_a_failure_not_an_error(tmp_path, caplog) -> None:
    src = xapi_mod.XapiNames("http://127.0.0.1:9", credentials_file=str(tmp_path / "missing"))
    assert src.lookup([WEB]) == {}
    assert any("cannot read credentials" in w for w in warnings_of(caplog))


# -- failures: {} for this lookup, one warning, a pause before the next try -----------


def test_xapi_bad_credentials_give_no_names(xapi_url) -> None:
    assert xapi_mod.XapiNames(xapi_url, "root", "wrong").lookup(["0f9c-uuid-1"]) == {}


def test_bad_password_warns_once_and_waits_before_trying_again(xapi, caplog) -> None:
    src = xapi_mod.XapiNames(xapi.url, "root", "wrong")
    for _ in range(5):
        assert src.lookup([WEB]) == {}
    assert xapi.logins() == 1  # within retry_s: XAPI is not asked again
    assert len(warnings_of(caplog)) == 1
    assert "authentication failed for user 'root'" in warnings_of(caplog)[0]


def test_one_warning_per_failure_episode(xapi, caplog) -> None:
    src = xapi_mod.XapiNames(xapi.url, "root", "secret", retry_s=0)
    xapi.users["root"] = "rotated"
    for _ in range(3):
        assert src.lookup([WEB]) == {}
    assert xapi.logins() == 3 and len(warnings_of(caplog)) == 1  # tried each time (retry_s=0), told once
    xapi.users["root"] = "secret"
    assert src.lookup([WEB]) == {WEB: "web-01"}
    xapi.users["root"] = "rotated-again"
    src.close()
    assert src.lookup([WEB]) == {}
    assert len(warnings_of(caplog)) == 2  # a new episode is told again


def test_unreachable_xapi_is_skipped() -> None:
    src = xapi_mod.XapiNames("http://127.0.0.1:9", "u", "p")
    lab = names.StaticNames({"a": "VM-A"})
    assert names.resolve_names([src, lab], ["a", "b"]) == {"a": ("VM-A", "lab")}


def test_nothing_listening(caplog) -> None:
    src = xapi_mod.XapiNames(f"http://127.0.0.1:{free_port()}", "root", "secret", timeout=TIMEOUT)
    started = time.monotonic()
    assert src.lookup([WEB]) == {}
    assert time.monotonic() - started < TIMEOUT
    assert len(warnings_of(caplog)) == 1 and "unreachable" in warnings_of(caplog)[0]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_hung_xapi_lookup_returns_within_the_timeout(hung, caplog, scheme) -> None:
    src = xapi_mod.XapiNames(hung.url(scheme), "root", "secret", timeout=TIMEOUT)
    started = time.monotonic()
    assert src.lookup([WEB]) == {}
    elapsed = time.monotonic() - started
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + MARGIN, elapsed
    assert len(warnings_of(caplog)) == 1 and f"no answer within {TIMEOUT:g} s" in warnings_of(caplog)[0]
    started = time.monotonic()
    assert src.lookup([WEB]) == {}  # within retry_s: not asked again, no wait
    assert time.monotonic() - started < 0.1


def test_xapi_hanging_after_login_keeps_the_session(xapi, caplog) -> None:
    src = xapi_mod.XapiNames(xapi.url, "root", "secret", timeout=TIMEOUT, retry_s=0)
    assert src.lookup([WEB]) == {WEB: "web-01"}
    xapi.hang.set()
    started = time.monotonic()
    assert src.lookup([WEB]) == {}
    assert time.monotonic() - started < TIMEOUT + MARGIN
    xapi.hang.clear()
    xapi.release.set()
    assert src.lookup([WEB]) == {WEB: "web-01"}
    assert xapi.logins() == 1  # the session outlived the timeout
    assert len(warnings_of(caplog)) == 1


def test_concurrent_lookups_do_not_queue_behind_a_hung_xapi(hung) -> None:
    src = xapi_mod.XapiNames(hung.url(), "root", "secret", timeout=TIMEOUT)
    took: list[float] = []

    def one() -> None:
        started = time.monotonic()
        assert src.lookup([WEB]) == {}
        took.append(time.monotonic() - started)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(took) == 4 and max(took) < TIMEOUT + MARGIN, took


def test_hung_xapi_does_not_stall_inventory(hung) -> None:
    """The next source still names the VM, and the whole resolution takes about the timeout."""
    src = xapi_mod.XapiNames(hung.url(), "root", "secret", timeout=TIMEOUT)
    lab = names.StaticNames({WEB: "lab-web"})
    started = time.monotonic()
    got = names.resolve_vms([src, lab], {WEB: (), DB: ()})
    assert time.monotonic() - started < TIMEOUT + MARGIN
    assert got == {WEB: names.VmInfo("lab-web", "lab")}
