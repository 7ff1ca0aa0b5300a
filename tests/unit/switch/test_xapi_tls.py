"""XAPI's transport security, against a local XAPI speaking https with a self-signed certificate made by
``openssl req`` (as XenServer's own is): a CA file or a pinned fingerprint is trusted, a wrong pin is
refused before the password is sent, ``user:pass@`` URLs are refused everywhere, ``http://`` is warned
about like a ``tcp:`` target, and the password reaches no log line."""

from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import config
from appliance.core import hostlist as hosts
from appliance.core.errors import ConfigError, UsageError
from appliance.frontdoor import hosts as frontdoor
from appliance.switch import xapi as xapi_mod
from tests.unit.switch.test_names_xapi import WEB, FakeXapi

PASSWORD = "Pa55-w0rd-x9"  # distinctive: found in a log line only if it leaked
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A self-signed certificate for 127.0.0.1 (key, certificate, fingerprint as openssl prints it)."""
    d = tmp_path_factory.mktemp("pki")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", str(crt)], check=True,
                         capture_output=True, text=True, timeout=30).stdout  # fmt: skip
    return key, crt, out.strip().split("=", 1)[1]  # "sha256 Fingerprint=AB:CD:..."


@pytest.fixture()
def xapi(cert: tuple[Path, Path, str]) -> Iterator[FakeXapi]:
    key, crt, _ = cert
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    server = FakeXapi(tls=ctx)
    server.users = {"root": PASSWORD}
    yield server
    server.close()


@pytest.fixture()
def creds(tmp_path: Path) -> str:
    f = tmp_path / "xapi-credentials"
    f.write_text(f"root:{PASSWORD}\n")
    f.chmod(0o600)
    return str(f)


@pytest.fixture(autouse=True)
def _every_log_line(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Whatever a test does, no log record, at any level, says the password (nor its traceback)."""
    caplog.set_level(logging.DEBUG)
    yield
    for r in caplog.records:
        assert PASSWORD not in r.getMessage(), r.getMessage()
        assert PASSWORD not in (caplog.handler.format(r) if r.exc_info else ""), r.name


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_system_store_does_not_know_a_self_signed_certificate(xapi: FakeXapi, creds: str, caplog) -> None:
    src = xapi_mod.XapiNames(xapi.url, credentials_file=creds)
    assert src.lookup([WEB]) == {}
    assert any("TLS failed" in w and "CERTIFICATE_VERIFY_FAILED" in w for w in _warnings(caplog)), _warnings(caplog)
    assert xapi.logins() == 0


def test_a_ca_file_is_trusted(xapi: FakeXapi, creds: str, cert) -> None:
    src = xapi_mod.XapiNames(xapi.url, credentials_file=creds, ca_file=str(cert[1]))
    assert src.lookup([WEB]) == {WEB: "web-01"}
    assert xapi.logins() == 1


def test_a_ca_file_still_checks_the_name(xapi: FakeXapi, creds: str, cert, caplog) -> None:
    url = xapi.url.replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    assert xapi_mod.XapiNames(url, credentials_file=creds, ca_file=str(cert[1])).lookup([WEB]) == {}
    assert any("TLS failed" in w for w in _warnings(caplog)) and xapi.logins() == 0


def test_the_pinned_fingerprint_is_trusted_whatever_the_name(xapi: FakeXapi, creds: str, cert) -> None:
    url = xapi.url.replace("127.0.0.1", "localhost")
    config_ = xapi_mod.XapiConfig.from_env({"HVNET_XAPI_URL": url, "HVNET_XAPI_CREDENTIALS": creds,
                                            "HVNET_XAPI_FINGERPRINT": cert[2]})  # fmt: skip
    assert config_ is not None and config_.fingerprint == cert[2].replace(":", "").lower()
    src = xapi_mod.XapiNames.from_config(config_)
    assert src.lookup([WEB]) == {WEB: "web-01"}
    assert xapi.logins() == 1


def test_a_wrong_pin_is_refused_before_the_password_is_sent(xapi: FakeXapi, creds: str, cert, caplog) -> None:
    wrong = "00" + cert[2][2:] if not cert[2].startswith("00") else "11" + cert[2][2:]
    src = xapi_mod.XapiNames(xapi.url, credentials_file=creds, fingerprint=wrong)
    assert src.lookup([WEB]) == {}
    said = _warnings(caplog)
    assert any(f"certificate fingerprint {cert[2]} is not the configured {wrong}" in w for w in said), said
    assert xapi.logins() == 0 and sum(xapi.calls.values()) == 0


def test_a_wrong_password_is_not_logged(xapi: FakeXapi, tmp_path: Path, cert, caplog) -> None:
    """The server's refusal names the user; the password sent stays out of the warning (checked for every
    test by the autouse fixture, here with the one password that was refused)."""
    xapi.users = {"root": "other"}
    f = tmp_path / "c"
    f.write_text(f"root:{PASSWORD}\n")
    src = xapi_mod.XapiNames(xapi.url, credentials_file=str(f), fingerprint=cert[2])
    assert src.lookup([WEB]) == {}
    assert any("authentication failed for user 'root'" in w for w in _warnings(caplog))
    assert xapi.logins() == 1


# -- user:pass@ is refused wherever a URL is given ---------------------------------------


URL_WITH_PASSWORD = f"https://root:{PASSWORD}@127.0.0.1:9"


def test_credentials_in_the_url_are_refused_by_the_source() -> None:
    with pytest.raises(ValueError, match="without USER:PASSWORD@") as exc:
        xapi_mod.XapiNames(URL_WITH_PASSWORD, "root", PASSWORD)
    assert PASSWORD not in str(exc.value)


def test_credentials_in_the_url_are_refused_in_hvnet_conf(tmp_path: Path) -> None:
    p = tmp_path / "hvnet.conf"
    p.write_text(f"[names]\nxapi_url = {URL_WITH_PASSWORD}\n")
    with pytest.raises(ConfigError) as exc:
        config.parse(p.read_text(), p)
    text = str(exc.value)
    assert f"{p}:2: names.xapi_url: 'https://***@127.0.0.1:9' is not allowed" in text, text
    assert "without USER:PASSWORD@" in text and PASSWORD not in text


def test_credentials_in_the_url_are_refused_in_the_inventory(tmp_path: Path) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_text(f"hosts:\n  - name: xs01\n    xapi_url: {URL_WITH_PASSWORD}\n    xapi_credentials: /etc/x\n")
    with pytest.raises(ConfigError) as exc:
        hosts.load(p)
    text = str(exc.value)
    assert f"{p}:3: hosts[0].xapi_url: allowed: a URL without USER:PASSWORD@" in text and PASSWORD not in text


def test_inventory_xapi_certificate_keys(tmp_path: Path, cert) -> None:
    p = tmp_path / "hosts.yaml"
    base = "hosts:\n  - name: xs01\n    xapi_url: {url}\n    xapi_credentials: /etc/x\n"
    p.write_text(base.format(url="https://192.0.2.1") + f"    xapi_fingerprint: {cert[2]}\n    xapi_ca: /etc/ca.pem\n")
    entry = hosts.load(p).get("xs01")
    assert entry is not None and entry.xapi_ca == "/etc/ca.pem"
    assert entry.xapi_fingerprint == cert[2].replace(":", "").lower()
    p.write_text(base.format(url="http://192.0.2.1") + "    xapi_fingerprint: 12:34\n    xapi_ca: etc/ca.pem\n")
    with pytest.raises(ConfigError) as exc:
        hosts.load(p)
    text = str(exc.value)
    assert f"{p}:5: hosts[0].xapi_fingerprint: allowed: a SHA-256 fingerprint" in text, text
    assert f"{p}:6: hosts[0].xapi_ca: allowed: an absolute path" in text, text
    p.write_text(base.format(url="http://192.0.2.1") + f"    xapi_fingerprint: {cert[2]}\n")
    with pytest.raises(ConfigError, match=r"hosts\[0\].xapi_url: an https:// URL: xapi_ca and xapi_fingerprint"):
        hosts.load(p)


# -- the front door: http warned about like tcp:, the CLI's exit 2 ------------------------


def test_http_is_warned_about_once_like_a_tcp_target(caplog, creds: str) -> None:
    url = "http://192.0.2.77"
    env = {"HVNET_XAPI_URL": url, "HVNET_XAPI_CREDENTIALS": creds}
    frontdoor.check_xapi(env, "/etc/hvnet/hvnet.conf:12")
    frontdoor.check_xapi(env, "/etc/hvnet/hvnet.conf:12")
    said = [w for w in _warnings(caplog) if url in w]
    assert said == [
        f"{url} (from /etc/hvnet/hvnet.conf:12) is plain HTTP: the pool's user and password are sent "
        "unencrypted, so anyone who can see that traffic can log in to the pool; use https://192.0.2.77, with "
        "xapi_ca or xapi_fingerprint for XenServer's self-signed certificate"
    ]
    frontdoor.check_xapi({**env, "HVNET_XAPI_URL": "https://192.0.2.77"}, "x")
    assert len([w for w in _warnings(caplog) if "plain HTTP" in w]) == 1
    with pytest.raises(UsageError, match="HVNET_XAPI_FINGERPRINT: 'abc' is not allowed"):
        frontdoor.check_xapi({**env, "HVNET_XAPI_FINGERPRINT": "abc"}, "x")


def _hvnet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HVNET_LAB_DIR": "/nonexistent/lab", **env}
    if "PYTHONPATH" in os.environ:  # the RPM's %check finds the vendored libraries through it
        full["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, cwd=ROOT,
                          env=full, timeout=60, check=False)  # fmt: skip


def test_the_cli_refuses_a_password_in_the_url_and_warns_about_http(tmp_path: Path, creds: str) -> None:
    db = f"unix:{tmp_path}/none.sock"
    res = _hvnet("--db", db, "status", env={"HVNET_XAPI_URL": URL_WITH_PASSWORD, "HVNET_XAPI_CREDENTIALS": creds})
    assert res.returncode == 2 and "HVNET_XAPI_URL: XAPI URL 'https://***@127.0.0.1:9' is not allowed" in res.stderr
    assert PASSWORD not in res.stderr + res.stdout and "Traceback" not in res.stderr
    res = _hvnet("--db", db, "status", env={"HVNET_XAPI_URL": "http://127.0.0.1:9", "HVNET_XAPI_CREDENTIALS": creds})
    assert "warning: http://127.0.0.1:9 (from HVNET_XAPI_URL) is plain HTTP" in res.stderr, res.stderr
    assert res.returncode == 3, res.stderr  # then the database, which is not there


def test_credentials_another_user_could_write_are_not_sent(xapi: FakeXapi, creds: str, cert, caplog) -> None:
    os.chmod(creds, 0o666)
    src = xapi_mod.XapiNames(xapi.url, credentials_file=creds, fingerprint=cert[2])
    assert src.lookup([WEB]) == {}
    said = _warnings(caplog)
    assert any(f"{creds}: owned by uid 0 with mode 666" in w and "the XAPI credentials must be owned by root" in w
               for w in said), said  # fmt: skip
    assert xapi.logins() == 0
