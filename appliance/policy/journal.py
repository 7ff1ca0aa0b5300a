"""What hvnet remembers about its changes: the audit log and the rollback records.

* The audit log is append-only JSON lines, one per change attempted: time,
  user, command, target, before, after, result.  ``/var/log/hvnet/audit.jsonl``
  on a host; the lab keeps its own beside its database.
* The rollback record of the last apply (``last-apply.json``) holds the exact
  stored values each change replaced, so ``hvnet rollback`` can put them back.
* A pending record (``pending.json``) marks an apply made with
  ``--no-commit``: unless ``hvnet commit`` removes it before its deadline, the
  watcher process rolls the change back.
"""

from __future__ import annotations

import getpass
import json
import os
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .planner import Change, describe

if TYPE_CHECKING:
    from ..host import Host

from .state import MirrorCols, PoliceCols, QosCols, QueueCols, TunnelCols, VlanCols


def user() -> str:
    sudo = os.environ.get("SUDO_USER")
    try:
        me = getpass.getuser()
    except (KeyError, OSError):
        me = str(os.geteuid())
    return f"{sudo} (as {me})" if sudo and sudo != me else me


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _summary(c: Change, value: Any) -> dict[str, Any]:
    return {"kind": c.kind, "bridge": c.bridge, "name": c.name, "value": describe(c.kind, value)}


# -- serialising changes (rollback records) ---------------------------------


def value_to_json(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "protocols":
        return list(value)
    return asdict(value)


def _pairs(items: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in items)


def value_from_json(kind: str, data: Any) -> Any:
    if data is None:
        return None
    if kind == "vlan":
        return VlanCols(data["vlan_mode"], data["tag"], tuple(data["trunks"]))
    if kind == "ingress":
        return PoliceCols(**data)
    if kind == "egress":
        return QosCols(
            data["type"],
            _pairs(data["other_config"]),
            _pairs(data["external_ids"]),
            tuple(
                QueueCols(q["number"], _pairs(q["other_config"]), _pairs(q["external_ids"]), q["dscp"])
                for q in data["queues"]
            ),
            uuid=data.get("uuid"),
        )
    if kind == "mirror":
        t = data.get("tunnel")
        return MirrorCols(
            select_all=data["select_all"],
            src=tuple(data["src"]),
            dst=tuple(data["dst"]),
            vlans=tuple(data["vlans"]),
            output_port=data["output_port"],
            output_vlan=data["output_vlan"],
            snaplen=data["snaplen"],
            filter=data["filter"],
            external_ids=_pairs(data["external_ids"]),
            tunnel=TunnelCols(t["name"], t["type"], _pairs(t["options"])) if t else None,
        )
    if kind == "protocols":
        return tuple(data)
    raise ValueError(f"unknown change kind {kind!r}")


def change_to_json(c: Change) -> dict[str, Any]:
    return {
        "kind": c.kind,
        "bridge": c.bridge,
        "name": c.name,
        "vm": c.vm,
        "note": c.note,
        "before": value_to_json(c.kind, c.before),
        "after": value_to_json(c.kind, c.after),
    }


def change_from_json(d: dict[str, Any]) -> Change:
    kind = d["kind"]
    return Change(
        kind,
        d["bridge"],
        d["name"],
        value_from_json(kind, d["before"]),
        value_from_json(kind, d["after"]),
        d.get("vm"),
        d.get("note", ""),
    )


def new_record(remote: str, command: str, changes: list[Change]) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex[:12],
        "time": now_iso(),
        "user": user(),
        "command": command,
        "target": remote,
        "changes": [change_to_json(c) for c in changes],
    }


def record_changes(record: dict[str, Any]) -> list[Change]:
    return [change_from_json(d) for d in record["changes"]]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent hvnet processes
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")  # one line: the C encoder
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def seconds_left(pending: dict[str, Any]) -> float:
    return float(pending["deadline"]) - time.time()


class Journal:
    """One host's audit log and rollback records (paths from the :class:`~appliance.host.Host`).

    Records carry the OVSDB remote they were made for; one read for another
    remote (a state directory shared by mistake) finds nothing rather than
    another switch's changes.
    """

    def __init__(self, remote: str, state_dir: Path, audit_log: Path) -> None:
        self.remote = remote
        self.state_dir = Path(state_dir)
        self.audit_path = Path(audit_log)

    @classmethod
    def for_host(cls, host: Host) -> Journal:
        return cls(host.remote, host.paths.state_dir, host.paths.audit_log)

    # -- the audit log -----------------------------------------------------------

    def audit(self, command: str, changes: list[Change], result: str, **extra: Any) -> Path:
        """Append one line to the audit log (creating its directory) and return its path."""
        entry = {
            "time": now_iso(),
            "user": user(),
            "command": command,
            "target": self.remote,
            "before": [_summary(c, c.before) for c in changes],
            "after": [_summary(c, c.after) for c in changes],
            "result": result,
            **extra,
        }
        self.audit_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.audit_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=False) + "\n")
        return self.audit_path

    def read_audit(self, last: int = 50) -> list[dict[str, Any]]:
        try:
            lines = self.audit_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for line in lines[-last:]:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    # -- rollback records ---------------------------------------------------------

    def new_record(self, command: str, changes: list[Change]) -> dict[str, Any]:
        return new_record(self.remote, command, changes)

    def save_last(self, record: dict[str, Any]) -> None:
        _write_json(self.state_dir / "last-apply.json", record)

    def load_last(self) -> dict[str, Any] | None:
        rec = _read_json(self.state_dir / "last-apply.json")
        return rec if rec and rec.get("target") == self.remote else None

    def load_rolled_back(self) -> dict[str, Any] | None:
        """The record of the apply rolled back last (what :meth:`mark_rolled_back` kept)."""
        rec = _read_json(self.state_dir / "last-apply.rolled-back.json")
        return rec if rec and rec.get("target") == self.remote else None

    def mark_rolled_back(self) -> None:
        path = self.state_dir / "last-apply.json"
        if path.exists():
            os.replace(path, path.with_name("last-apply.rolled-back.json"))

    def save_pending(self, record: dict[str, Any], deadline: float, watcher_pid: int | None) -> None:
        _write_json(self.state_dir / "pending.json", {**record, "deadline": deadline, "watcher_pid": watcher_pid})

    def load_pending(self) -> dict[str, Any] | None:
        rec = _read_json(self.state_dir / "pending.json")
        return rec if rec and rec.get("target") == self.remote else None

    def clear_pending(self, record_id: str) -> bool:
        """Remove the pending record if it is still ``record_id`` (True when removed)."""
        path = self.state_dir / "pending.json"
        rec = _read_json(path)
        if rec is None or rec.get("id") != record_id:
            return False
        path.unlink(missing_ok=True)
        return True
