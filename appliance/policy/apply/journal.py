"""What hvnet remembers about its changes: the audit log and the rollback records.

* The audit log is append-only JSON lines, one per change attempted: time,
  user, command, target, before, after, result.  ``/var/log/hvnet/audit.jsonl``
  on a host; the lab keeps its own beside its database.
* The rollback record of the last apply (``last-apply.json``) holds the exact
  stored values each change replaced, so ``hvnet rollback`` can put them back.
* A pending record (``pending.json``) marks an apply made with
  ``--no-commit``: unless ``hvnet commit`` removes it before its deadline, the
  watcher process rolls the change back.
* An intent (``applying.<id>.json``) is written before each commit and removed
  once the apply is audited: a process killed in between leaves it behind, and
  the next hvnet to open the journal settles it (see
  :meth:`appliance.policy.apply.recovery.settle_interrupted`).

Every file is written to a temporary name, flushed to disk and renamed, and
the audit log is flushed to disk line by line: after a crash or a power cut a
record is either the old one or the new one, and an acknowledged change has
its audit line.  A file that exists but cannot be read is an error, never
"nothing recorded".
"""

from __future__ import annotations

import getpass
import glob
import json
import os
import pwd
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core import documents, safedirs
from appliance.core.errors import HvnetError
from appliance.core.vlan import VlanCols
from appliance.policy.plan.planner import Change, describe

if TYPE_CHECKING:
    from appliance.switch.host import Host

from appliance.policy.plan.state import MirrorCols, PoliceCols, QosCols, QueueCols, TunnelCols
from appliance.switch.sampling import IpfixCols, SflowCols


class JournalError(HvnetError):
    """The audit log or a rollback record cannot be written or read."""


def user() -> str:
    """Who made the change: the login user the kernel keeps for this session, and the effective one.

    ``SUDO_USER`` is an environment variable any process can set, so it is
    not trusted: the audit subsystem's login uid (``/proc/self/loginuid``),
    which ``sudo`` and ``su`` cannot change, names the person.  Without one
    (a daemon, a container) the effective user is recorded, and a
    ``SUDO_USER`` that says otherwise is kept as an unverified claim.
    """
    me = _name_of(os.geteuid())
    login = _login_uid()
    if login is not None and login != os.geteuid():
        return f"{_name_of(login)} (as {me})"
    claimed = os.environ.get("SUDO_USER")
    if login is None and claimed and claimed != me:
        return f"{me} (SUDO_USER={claimed}, unverified)"
    return me


def _login_uid() -> int | None:
    try:
        value = int(Path("/proc/self/loginuid").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if value in (-1, 4294967295) else value


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        try:
            return getpass.getuser() if uid == os.geteuid() else str(uid)
        except (KeyError, OSError):
            return str(uid)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _summary(c: Change, value: Any) -> dict[str, Any]:
    return {"kind": c.kind, "bridge": c.bridge, "name": c.name, "value": describe(c.kind, value)}


# -- serialising changes (rollback records) ---------------------------------


# OVS keeps ingress policing in kbit/s and kbit; a record (version 2) and ``plan``/``apply --json`` write
# bit/s and bits like every JSON key.  A version 1 record (the kbit keys) still reads: a pending or last
# apply saved by an older hvnet can be committed or rolled back by this one.
POLICE_KEYS = (
    ("rate_kbps", "rate_bits_per_s"),
    ("burst_kbit", "burst_bits"),
    ("meter_rate_kbps", "meter_rate_bits_per_s"),
    ("meter_burst_kbit", "meter_burst_bits"),
)


def _police_to_json(p: PoliceCols) -> dict[str, Any]:
    return {new: None if getattr(p, old) is None else getattr(p, old) * 1000 for old, new in POLICE_KEYS}


def _police_from_json(data: dict[str, Any]) -> PoliceCols:
    if any(old in data for old, _ in POLICE_KEYS):  # version 1
        return PoliceCols(**data)
    values = {}
    for old, new in POLICE_KEYS:
        v = data[new]
        if v is not None and (not isinstance(v, int) or v % 1000):
            raise ValueError(f"{new}: {v!r} is not a whole number of kbit (OVS's unit)")
        values[old] = None if v is None else v // 1000
    return PoliceCols(**values)


# The sampling rows' durations and sizes, kept as the policy file names them: written with their unit (same value)
SAMPLING_KEYS = {"polling": "polling_s", "header": "header_bytes", "cache_active_timeout": "cache_active_timeout_s"}
_SAMPLING_OLD = {new: old for old, new in SAMPLING_KEYS.items()}


def value_to_json(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "ingress":
        return _police_to_json(value)
    if kind in ("sflow", "ipfix"):
        return {SAMPLING_KEYS.get(k, k): v for k, v in asdict(value).items()}
    if kind == "protocols":
        return list(value)
    if kind == "tap":
        return value.to_json()
    return asdict(value)


def _pairs(items: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in items)


def value_from_json(kind: str, data: Any) -> Any:
    if data is None:
        return None
    if kind == "vlan":
        return VlanCols(data["vlan_mode"], data["tag"], tuple(data["trunks"]))
    if kind == "ingress":
        return _police_from_json(data)
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
    if kind == "tap":
        from appliance.policy.plan.taps import TapCols

        return TapCols.from_text(json.dumps(data))
    if kind in ("sflow", "ipfix"):
        data = {_SAMPLING_OLD.get(k, k): v for k, v in data.items()}  # version 1 wrote the columns' own names
    if kind == "sflow":
        return SflowCols(**{**data, "targets": tuple(data["targets"]), "external_ids": _pairs(data["external_ids"])})
    if kind == "ipfix":
        return IpfixCols(
            **{
                **data,
                "targets": tuple(data["targets"]),
                "other_config": _pairs(data["other_config"]),
                "external_ids": _pairs(data["external_ids"]),
            }
        )
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
    return documents.ROLLBACK_RECORD.stamp(
        {
            "id": uuid.uuid4().hex[:12],
            "time": now_iso(),
            "user": user(),
            "command": command,
            "target": remote,
            "changes": [change_to_json(c) for c in changes],
        }
    )


def record_changes(record: dict[str, Any]) -> list[Change]:
    return [change_from_json(d) for d in record["changes"]]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see :func:`safedirs.write_json_durably`)."""
    try:
        safedirs.write_json_durably(path, data)
    except OSError as exc:
        raise JournalError(f"cannot write {path}: {exc.strerror or exc}", hint=_SPACE_HINT) from None


_SPACE_HINT = "is the file system full or read-only, or is hvnet run by a user who may not write there?"


def _read_json(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; None when there is none; an error when it exists and cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise JournalError(
            f"{path} is corrupt ({exc}); nothing was rolled back or changed",
            hint="look at the file, then move it aside: hvnet will not guess what it held",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("changes", []), list):
        raise JournalError(f"{path} is not an hvnet record; nothing was rolled back or changed")
    return data


def seconds_left(pending: dict[str, Any]) -> float:
    return float(pending["deadline"]) - time.time()


class Journal:
    """One host's audit log and rollback records (paths from the :class:`~appliance.switch.host.Host`).

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
        """The host's journal.  A host over SSH keeps its records in ``STATE_DIR/hosts/NAME``: one
        console applies to many hosts (``--hosts``), and each host's rollback must undo its own last apply."""
        state_dir = host.paths.state_dir
        if host.label is not None:
            state_dir = state_dir / "hosts" / host.label
        return cls(host.identity, state_dir, host.paths.audit_log)

    # -- the audit log -----------------------------------------------------------

    def audit(self, command: str, changes: list[Change], result: str, **extra: Any) -> Path:
        """Append one line to the audit log (creating its directory) and return its path."""
        # a line written before lines named their schema is version 1 all the same: nothing was renamed
        entry = {
            "schema": documents.AUDIT_LINE.name,
            "version": documents.AUDIT_LINE.version,
            "time": now_iso(),
            "user": user(),
            "command": command,
            "target": self.remote,
            "before": [_summary(c, c.before) for c in changes],
            "after": [_summary(c, c.after) for c in changes],
            "result": result,
            **extra,
        }
        try:
            self.audit_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.audit_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, sort_keys=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise JournalError(f"cannot write the audit log {self.audit_path}: {exc.strerror or exc}") from None
        return self.audit_path

    def check_writable(self) -> None:
        """Fail before a commit that could not be audited (a user who may reach OVSDB but not write here)."""
        try:
            self.audit_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.audit_path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise JournalError(
                f"cannot write the audit log {self.audit_path}: {exc.strerror or exc}; nothing was applied",
                hint=_SPACE_HINT,
            ) from None

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

    def save_last(self, record: dict[str, Any], *, replaces: bool = True) -> None:
        """Make ``record`` what ``hvnet rollback`` undoes.

        ``replaces``: the record there now is kept aside for :meth:`unsave_last`
        (False when ``record`` is re-saved with more changes).  The intent
        written before the commit already holds these bytes, flushed to disk:
        when it is there it is linked into place rather than written again (a
        1000-VIF record is a few hundred kB).
        """
        path = self.state_dir / "last-apply.json"
        if replaces and path.exists():
            os.replace(path, path.with_name("last-apply.previous.json"))
        intent = self._intent_path(record["id"])
        if replaces and intent.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                tmp.unlink(missing_ok=True)
                os.link(intent, tmp)
                os.replace(tmp, path)
                safedirs.fsync_dir(path.parent)
                return
            except OSError:
                pass  # a file system without hard links: written out below
        _write_json(path, record)

    def unsave_last(self, record_id: str) -> None:
        """The apply ``record_id`` was undone before it finished: what rollback undoes is the one before again."""
        path = self.state_dir / "last-apply.json"
        current = _read_json(path)
        if current is None or current.get("id") != record_id:
            return
        previous = path.with_name("last-apply.previous.json")
        if previous.exists():
            os.replace(previous, path)
        else:
            path.unlink(missing_ok=True)

    def load_last(self) -> dict[str, Any] | None:
        rec = _read_json(self.state_dir / "last-apply.json")
        return rec if rec and rec.get("target") == self.remote else None

    def load_rolled_back(self) -> dict[str, Any] | None:
        """The record of the apply rolled back last (what :meth:`mark_rolled_back` kept)."""
        rec = _read_json(self.state_dir / "last-apply.rolled-back.json")
        return rec if rec and rec.get("target") == self.remote else None

    def mark_rolled_back(self, record: dict[str, Any]) -> None:
        """``record`` was undone: it is what :meth:`load_rolled_back` says, and no longer the last apply."""
        path = self.state_dir / "last-apply.json"
        _write_json(path.with_name("last-apply.rolled-back.json"), record)
        current = _read_json(path)
        if current is not None and current.get("id") == record.get("id"):
            path.unlink(missing_ok=True)

    def save_pending(self, record: dict[str, Any], deadline: float, watcher_pid: int | None) -> None:
        _write_json(self.state_dir / "pending.json", {**record, "deadline": deadline, "watcher_pid": watcher_pid})

    def reserve_pending(self, owner: str) -> None:
        """Take the one pending slot before applying (atomic: of two applies at once, one gets it).

        The reservation is a pending record with no changes and no deadline;
        :meth:`save_pending` replaces it once the apply is made, and
        :meth:`release_pending` frees it when nothing was applied.
        """
        path = self.state_dir / "pending.json"
        held = _read_json(path)
        if held is not None and held.get("reserved") and not _alive(int(held.get("pid", 0))):
            path.unlink(missing_ok=True)  # reserved by an apply that was killed before it was made
        # Written whole beside it, then linked into place: link() fails when the name exists (one of
        # two applies wins) and a reader never sees the slot half-written (an empty file is "corrupt").
        tmp = self.state_dir / f".pending.{os.getpid()}.{owner}.tmp"
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"id": owner, "target": self.remote, "changes": [], "reserved": True, "pid": os.getpid()}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)
        except FileExistsError:
            raise HvnetError(
                "an earlier --no-commit apply is still pending", hint="hvnet commit, or hvnet rollback"
            ) from None
        except OSError as exc:
            raise JournalError(f"cannot write {path}: {exc.strerror or exc}", hint=_SPACE_HINT) from None
        finally:
            tmp.unlink(missing_ok=True)

    def release_pending(self, owner: str) -> None:
        self.clear_pending(owner)

    def load_pending(self) -> dict[str, Any] | None:
        """The change waiting for ``hvnet commit`` (a slot reserved by an apply still running is not one yet)."""
        rec = _read_json(self.state_dir / "pending.json")
        return rec if rec and rec.get("target") == self.remote and not rec.get("reserved") else None

    def clear_pending(self, record_id: str) -> bool:
        """Remove the pending record if it is still ``record_id`` (True when removed)."""
        path = self.state_dir / "pending.json"
        rec = _read_json(path)
        if rec is None or rec.get("id") != record_id:
            return False
        path.unlink(missing_ok=True)
        return True

    # -- intents (write-ahead) -------------------------------------------------------

    def write_intent(self, record: dict[str, Any], *, keep: bool) -> None:
        """Say what is about to be committed, before the commit (``keep``: it becomes the rollback record)."""
        _write_json(self._intent_path(record["id"]), {**record, "pid": os.getpid(), "keep": keep})

    def mark_committed(self, record_id: str) -> None:
        """The switch acknowledged the intent's commit: a later settle that does not find the change
        then knows the host lost it (a crash before its database reached the disk), not that hvnet
        stopped short of committing."""
        path = self._intent_path(record_id)
        rec = _read_json(path)
        if rec is not None:
            _write_json(path, {**rec, "committed": True})

    def clear_intent(self, record_id: str) -> None:
        self._intent_path(record_id).unlink(missing_ok=True)

    def interrupted(self) -> list[dict[str, Any]]:
        """Intents of this switch left by hvnet processes that are gone (killed between commit and audit)."""
        out = []
        for name in sorted(glob.glob(str(self.state_dir / "applying.*.json"))):
            try:
                rec = _read_json(Path(name))
            except JournalError as exc:
                raise JournalError(f"{exc.message}; the apply it describes may or may not have been made") from None
            if rec and rec.get("target") == self.remote and not _alive(int(rec.get("pid", 0))):
                out.append(rec)
        return out

    def _intent_path(self, record_id: str) -> Path:
        return self.state_dir / f"applying.{record_id}.json"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is an hvnet process still running (a recycled pid running something else is not)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"hvnet" in cmdline or b"appliance" in cmdline
