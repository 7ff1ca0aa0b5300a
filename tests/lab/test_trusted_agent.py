"""A running agent and the trust rule of its policy file, on a real ovsdb-server (see tests/unit/core/test_trusted.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.core.errors import UsageError
from tests.unit.core.test_trusted import POLICY, _dir, _file


@pytest.fixture(autouse=True)
def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("these tests chown files to another user: they need root")


def test_a_running_agent_refuses_to_reload_a_policy_others_can_write(tmp_path: Path, switch, caplog) -> None:
    """On a real ovsdb-server: the reload is refused with the reason and the previous policy stays in force."""
    from appliance.agent.daemon import Agent
    from appliance.core.target import DbTarget
    from appliance.policy import COLUMNS
    from appliance.switch import api
    from appliance.switch.host import DataPaths, Host, NameConfig

    d = _dir(tmp_path)
    policy = _file(d, "policy.yaml", POLICY)
    host = Host(DbTarget(switch.remote, "test"), paths=DataPaths.for_lab(tmp_path / "data"),
                names=NameConfig(libvirt_uri="none"))  # fmt: skip
    conn = api.connect(host, timeout=5, columns=COLUMNS)
    try:
        agent = Agent(conn, host, policy)
        before = agent.policy
        policy.write_text(POLICY.replace("tag: 5", "tag: 6"))
        policy.chmod(0o666)
        agent._do_reload()
        assert agent.policy is before
        refused = [r.getMessage() for r in caplog.records if "reload refused" in r.getMessage()]
        assert refused and str(policy) in refused[0] and "mode 666" in refused[0], refused
        policy.chmod(0o644)
        agent._do_reload()
        assert agent.policy is not before
        policy.chmod(0o666)
        with pytest.raises(UsageError, match="the policy the agent enforces must be owned by root"):
            Agent(conn, host, policy)
    finally:
        conn.close()
