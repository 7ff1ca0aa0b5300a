"""``hvnet exporter`` over HTTPS as hvnet.conf sets it: certificates made by openssl here, the real
process, and Python's ssl as the client -- refused without a client certificate and with one another CA
signed, served with one its CA signed; broken TLS settings in the file are exit 2 at their file:line."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[3]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key_and_csr(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)  # fmt: skip


def _self_signed(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", cwd=cwd)  # fmt: skip


def _signed(name: str, cn: str, ca: str, cwd: Path, ext: str = "") -> None:
    _key_and_csr(name, cn, cwd)
    extra = []
    if ext:
        (cwd / f"{name}.ext").write_text(ext + "\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", *extra, cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _self_signed("ca", d)  # signs the server and Prometheus
    _self_signed("rogue", d)  # signs nobody we trust
    _signed("server", "127.0.0.1", "ca", d, "subjectAltName=IP:127.0.0.1")
    _signed("prometheus", "prometheus", "ca", d)
    _signed("intruder", "prometheus", "rogue", d)
    return d


def _conf(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o644)
    return path


def _start(conf: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "HVNET_CONFIG": str(conf), "HVNET_LAB_DIR": "/nonexistent"}
    env = {k: v for k, v in env.items() if not k.startswith("HVNET_EXPORTER_")}
    argv = [sys.executable, "-m", "appliance", "--db", "unix:/nonexistent/db.sock", "exporter", "--policy", "none"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def served(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as probe:  # a free port (the file takes 1-65535, not "any")
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = _conf(
        tmp_path_factory.mktemp("conf") / "hvnet.conf",
        f"""[exporter]
listen = 127.0.0.1:{port}
tls_cert = {pki}/server.crt
tls_key = {pki}/server.key
client_ca = {pki}/ca.crt
""",
    )
    proc = _start(conf)
    line = proc.stdout.readline() if proc.stdout else ""
    try:
        assert "serving https://127.0.0.1:" in line, line + (proc.stderr.read() if proc.stderr else "")
        yield line.split("serving ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        err = proc.stderr.read() if proc.stderr else ""
        assert proc.returncode == 0 and "Traceback" not in err, err


def _client(pki: Path, cert: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert is not None:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return ctx


def _get(url: str, ctx: ssl.SSLContext) -> str:
    with urllib.request.urlopen(url, timeout=10, context=ctx) as reply:
        return reply.read().decode()


def test_a_client_with_a_certificate_its_ca_signed_is_served(served: str, pki: Path) -> None:
    assert "\nhvnet_up 0.0\n" in _get(served, _client(pki, "prometheus"))


@pytest.mark.parametrize("cert", [None, "intruder"])
def test_a_client_without_a_trusted_certificate_is_refused(served: str, pki: Path, cert: str | None) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        _get(served, _client(pki, cert))


def test_a_silent_client_holds_nobody_back(served: str, pki: Path) -> None:
    port = int(served.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)):  # connected, never starts the handshake
        started = time.monotonic()
        assert "hvnet_up" in _get(served, _client(pki, "prometheus"))
        assert time.monotonic() - started < 3
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP on the HTTPS port: refused, not served
        urllib.request.urlopen(served.replace("https:", "http:"), timeout=10).read()


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ("tls_cert = {pki}/server.crt\n", ":2: {pki}/server.crt: HTTPS needs both a certificate and its key"),
        ("client_ca = {pki}/ca.crt\n", ":2: client_ca needs HTTPS"),
        ("tls_cert = {pki}/ca.key\ntls_key = {pki}/server.key\n", ":2: {pki}/ca.key with the key"),
        ("tls_cert = {pki}/server.crt\ntls_key = {pki}/server.key\nclient_ca = {pki}/none.crt\n",
         ":4: {pki}/none.crt: cannot load"),
        ("tls_cert = server.crt\n", ":2: exporter.tls_cert: 'server.crt' is not allowed; allowed: an absolute path"),
        ("scrape_timeout = 61\n", ":2: exporter.scrape_timeout: '61' is not allowed"),
        ("listen = 0.0.0.0:9477\n", ":2: 0.0.0.0: not a loopback address"),
    ],
)  # fmt: skip
def test_broken_settings_in_the_file_are_exit_2_at_their_line(pki: Path, tmp_path: Path, lines: str, said: str) -> None:
    conf = _conf(tmp_path / "hvnet.conf", "[exporter]\n" + lines.format(pki=pki))
    proc = _start(conf)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_USAGE, out + err
    assert said.format(pki=pki) in err and "Traceback" not in err, err
