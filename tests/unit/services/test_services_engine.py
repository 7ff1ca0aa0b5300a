"""services.engine without a switch: an engine opened on a front end's own connection."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from appliance.core.target import DbTarget
from appliance.services import engine as svc
from appliance.switch.host import Host


def test_open_engine_on_a_front_ends_connection_takes_its_modes_as_options(tmp_path: Path) -> None:
    """The console and the agent keep their connection; --policing, --hosts and the agent's mode are options."""
    from appliance.switch.host import DataPaths, NameConfig

    host = Host(DbTarget("unix:/run/x/db.sock", "--db"), paths=DataPaths.for_lab(tmp_path),
                names=NameConfig(libvirt_uri="none"))  # fmt: skip
    conn: Any = SimpleNamespace(target=host.target)
    plain = svc.open_engine(host, "hvnet tui", conn=conn)
    assert plain.conn is conn and plain.command == "hvnet tui"
    assert (plain.force_policing, plain.pool, plain.lenient, plain.audit_unchanged) == (None, False, False, True)
    agent = svc.open_engine(host, "hvnet agent", conn=conn, policing="meter", pool=True, enforcing=True)
    assert (agent.force_policing, agent.pool, agent.lenient, agent.audit_unchanged) == ("meter", True, True, False)
