"""VM names from a dom0's own XAPI, through its unix socket, with no credentials.

The server is real: Python's XML-RPC dispatcher on a unix stream socket in a thread, answering
``session.login_with_password`` (any password: xapi does not check one on its local socket, it is
pre-authenticated root), ``VM.get_all_records_where`` and ``session.logout`` in XAPI's shapes.
"""

from __future__ import annotations

import collections
import logging
import os
import socketserver
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xmlrpc.server import SimpleXMLRPCDispatcher, SimpleXMLRPCRequestHandler

import pytest

from appliance.switch import names
from appliance.switch import xapi as xapi_mod
from tests.unit.switch.test_names_xapi import DB, TEMPLATE, WEB, FakeXapi, failure

INVENTORY = Path(__file__).resolve().parents[1] / "data" / "dom0" / "xensource-inventory-xcp-ng-8.2.1"


class _Handler(SimpleXMLRPCRequestHandler):
    disable_nagle_algorithm = False  # TCP_NODELAY: not on a unix socket

    def address_string(self) -> str:  # a unix socket's peer has no address
        return "local"


class UnixXapi(socketserver.UnixStreamServer, SimpleXMLRPCDispatcher):
    """XAPI's local socket: the same calls as :class:`FakeXapi`, where any login succeeds."""

    def __init__(self, path: str) -> None:
        self.logRequests = False
        SimpleXMLRPCDispatcher.__init__(self, allow_none=True, encoding=None)
        socketserver.UnixStreamServer.__init__(self, path, _Handler)
        # FakeXapi's dispatch (XAPI's answers), on a state of its own: no TCP server of FakeXapi's
        self.xapi = SimpleNamespace(
            users={}, sessions=set(), keep_sessions=True, calls=collections.Counter(), hang=threading.Event(),
            release=threading.Event(),
            vms={
                "OpaqueRef:vm-1": {"uuid": WEB, "name_label": "web-01", "is_a_template": False},
                "OpaqueRef:vm-2": {"uuid": DB, "name_label": "db-01", "is_a_template": False},
                "OpaqueRef:tpl": {"uuid": TEMPLATE, "name_label": "Debian 12", "is_a_template": True},
            },
        )  # fmt: skip
        self.refuse = False
        self.logins: list[tuple[str, str]] = []
        self.register_instance(self)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def _dispatch(self, method: str, params: tuple[Any, ...]) -> dict[str, Any]:
        if method == "session.login_with_password":
            self.logins.append((params[0], params[1]))
            if self.refuse:
                return failure("SESSION_AUTHENTICATION_FAILED", params[0], "Authentication failure")
            self.xapi.users[params[0]] = params[1]  # pre-authenticated: whatever is given is accepted
        return FakeXapi._dispatch(self.xapi, method, params)  # type: ignore[arg-type]

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def server(tmp_path: Path):
    srv = UnixXapi(str(tmp_path / "xapi"))
    yield srv
    srv.close()


def test_names_through_the_local_socket_as_root_without_a_password(server: UnixXapi) -> None:
    source = xapi_mod.XapiNames.from_config(xapi_mod.local_config(server.server_address, timeout=1.0))
    assert source.local and source.user == "root"
    assert source.lookup([WEB, DB, TEMPLATE, "nope"]) == {WEB: "web-01", DB: "db-01"}
    assert server.logins == [("root", "")]
    assert source.lookup([WEB]) == {WEB: "web-01"}  # the session is kept
    assert server.logins == [("root", "")]
    source.close()
    assert server.xapi.calls["session.logout"] == 1 and not server.xapi.sessions


def test_a_missing_socket_says_what_was_tried_and_the_hint(tmp_path: Path, caplog) -> None:
    source = xapi_mod.XapiNames.from_config(xapi_mod.local_config(str(tmp_path / "none"), timeout=0.5))
    with caplog.at_level(logging.WARNING, logger="hvnet.names"):
        assert source.lookup([WEB]) == {}
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = record.getMessage()
    assert f"XAPI through dom0's socket {tmp_path / 'none'} (as root, no password) not usable" in text
    assert "no socket at" in text and "is xapi running?" in text
    assert xapi_mod.LOCAL_HINT in text and "Traceback" not in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens any socket")
def test_a_socket_only_root_may_open_says_so(server: UnixXapi, caplog) -> None:
    os.chmod(server.server_address, 0o600)
    os.chmod(os.path.dirname(server.server_address), 0o000)
    try:
        source = xapi_mod.XapiNames.from_config(xapi_mod.local_config(server.server_address, timeout=0.5))
        with caplog.at_level(logging.WARNING, logger="hvnet.names"):
            assert source.lookup([WEB]) == {}
        assert "permission denied on" in caplog.text and "only root may use it" in caplog.text
    finally:
        os.chmod(os.path.dirname(server.server_address), 0o700)


def test_a_refused_login_is_a_warning_with_the_hint(server: UnixXapi, caplog) -> None:
    server.refuse = True
    source = xapi_mod.XapiNames.from_config(xapi_mod.local_config(server.server_address, timeout=1.0))
    with caplog.at_level(logging.WARNING, logger="hvnet.names"):
        assert source.lookup([WEB]) == {}
    assert "authentication failed for user 'root'" in caplog.text and xapi_mod.LOCAL_HINT in caplog.text


def test_chosen_only_in_a_dom0_as_root(tmp_path: Path) -> None:
    sock = str(tmp_path / "xapi")
    assert names.local_xapi(sock, str(INVENTORY), euid=0) == xapi_mod.local_config(sock)
    assert names.local_xapi(sock, str(INVENTORY), euid=1000) is None  # only root may open the socket
    assert names.local_xapi(sock, str(tmp_path / "no-inventory"), euid=0) is None  # not a dom0
    (tmp_path / "inv").write_text("PRODUCT_BRAND='XCP-ng'\n")
    assert names.local_xapi(sock, str(tmp_path / "inv"), euid=0) is None  # no host and control domain


def test_configured_settings_win_over_the_local_socket(monkeypatch) -> None:
    local = xapi_mod.local_config("/nonexistent/xapi")
    monkeypatch.setattr(names, "local_xapi", lambda: local)
    env = {"HVNET_XAPI_URL": "https://pool-master", "HVNET_XAPI_CREDENTIALS": "/etc/hvnet/xapi"}
    [source] = [s for s in names.default_sources(None, env, this_host=True) if s.name == "xapi"]
    assert source.url == "https://pool-master"
    [source] = [s for s in names.default_sources(None, {}, this_host=True) if s.name == "xapi"]
    assert source.url == "unix:/nonexistent/xapi"
    assert not [s for s in names.default_sources(None, {}, this_host=False) if s.name == "xapi"]
