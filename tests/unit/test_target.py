import pytest

from appliance import target
from appliance.errors import UsageError


def test_order_db_option_first(tmp_path) -> None:
    env = {"HVNET_DB": "unix:/env.sock", "HVNET_LAB_DIR": str(tmp_path)}
    t = target.resolve("tcp:127.0.0.1:6640", environ=env)
    assert (t.remote, t.source) == ("tcp:127.0.0.1:6640", "--db")


def test_env_then_system_default(tmp_path) -> None:
    env = {"HVNET_DB": "unix:/env.sock", "HVNET_LAB_DIR": str(tmp_path)}
    assert target.resolve(environ=env).source == "HVNET_DB"
    t = target.resolve(environ={"HVNET_LAB_DIR": str(tmp_path / "no-lab")})
    assert (t.remote, t.source) == (target.SYSTEM_DB, "system default")


@pytest.mark.parametrize("bad", ["db.sock", "unix:", "tcp:host", "tcp:host:99999", "http://x", "ssl:a b:1"])
def test_invalid_targets(bad) -> None:
    with pytest.raises(UsageError, match="invalid OVSDB target"):
        target.resolve(bad, environ={})


def test_ssl_needs_key_cert_ca(tmp_path) -> None:
    with pytest.raises(UsageError, match="needs --ssl-key, --ssl-cert, --ssl-ca"):
        target.resolve("ssl:10.0.0.1:6640", environ={})
    for n in ("k", "c", "ca"):
        (tmp_path / n).write_text("x")
    t = target.resolve(
        "ssl:[::1]:6640", ssl_key=str(tmp_path / "k"), ssl_cert=str(tmp_path / "c"), ssl_ca=str(tmp_path / "ca"),
        environ={},
    )  # fmt: skip
    assert t.ssl is not None and t.ssl.ca_cert.endswith("ca")
    with pytest.raises(UsageError, match="no such file"):
        target.resolve("ssl:h:1", ssl_key="/nonexistent", ssl_cert="/x", ssl_ca="/y", environ={})
