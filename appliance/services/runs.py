"""Saved suite runs kept and removed: ``hvnet suite prune``, ``pin`` and ``unpin``.

Runs live in the runs directory (``/var/lib/hvnet/runs`` by default, where
nothing ages them out); :mod:`appliance.netperf.store.retention` decides which of
them a prune removes, this module finds them, pins them and removes them.
Only a directory directly in the runs directory whose ``results.json`` is an
hvnet run is ever considered: anything else there is left alone.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError, UsageError
from appliance.netperf.store import results
from appliance.netperf.store.retention import PIN_FILE, Decision, SavedRun, decide, parse_age

__all__ = ["PIN_FILE", "PruneResult", "parse_age", "pin", "prune", "saved_runs", "unpin"]


def _started(text: Optional[str]) -> Optional[datetime]:
    try:
        when = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc) if when is not None and when.tzinfo is None else when


def saved_runs(base: Path) -> list[SavedRun]:
    """Every hvnet run directly in ``base`` (a symlink to one is not followed: it is not a run kept here)."""
    found = []
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if d.is_symlink() or not d.is_dir():
            continue
        try:
            doc = results.load(d)
        except HvnetError:
            continue
        found.append(SavedRun(d, doc.meta.suite.name, _started(doc.meta.started), doc.state,
                              (d / PIN_FILE).is_file()))  # fmt: skip
    return found


@dataclass
class PruneResult:
    """What a prune decided and, unless it was a dry run, what it removed."""

    base: Path
    dry_run: bool
    decisions: list[Decision]
    failed: dict[Path, str] = field(default_factory=dict)  # run -> why it could not be removed

    @property
    def removed(self) -> list[Decision]:
        return [d for d in self.decisions if d.remove and d.run.path not in self.failed]

    def to_json(self) -> dict[str, Any]:
        def one(d: Decision) -> dict[str, Any]:
            r = d.run
            return {"run": str(r.path), "suite": r.suite, "started": r.started.isoformat() if r.started else None,
                    "state": r.state, "pinned": r.pinned, "reason": d.reason}  # fmt: skip

        return {
            "runs_dir": str(self.base), "dry_run": self.dry_run,
            ("would_remove" if self.dry_run else "removed"): [one(d) for d in self.removed],
            "kept": [one(d) for d in self.decisions if not d.remove],
            "failed": {str(p): why for p, why in self.failed.items()},
        }  # fmt: skip


def prune(
    base: Path, *, keep: Optional[int] = None, older_than: Optional[timedelta] = None, dry_run: bool = True,
    now: Optional[datetime] = None,
) -> PruneResult:  # fmt: skip
    """Decide, and unless ``dry_run`` remove, the runs in ``base`` the rules select."""
    if keep is None and older_than is None:
        raise UsageError("give --keep N, --older-than AGE or both", hint="e.g. hvnet suite prune --older-than 30d")
    if not base.is_dir():
        raise UsageError(f"no runs directory at {base}", hint="--runs DIR names another")
    now = now or datetime.now(timezone.utc)
    result = PruneResult(base, dry_run, decide(saved_runs(base), keep=keep, older_than=older_than, now=now))
    if not dry_run:
        for d in result.decisions:
            if d.remove:
                try:
                    shutil.rmtree(d.run.path)
                except OSError as exc:
                    result.failed[d.run.path] = exc.strerror or str(exc)
    return result


def pin(run: Path, note: str = "") -> Path:
    """Keep ``run`` from every prune (a ``pinned`` file in it, saying when and why)."""
    results.load(run)  # an hvnet run, or a clear error
    marker = Path(run) / PIN_FILE
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(f"pinned {stamp}{': ' + ' '.join(note.split()) if note else ''}\n")
    return marker


def unpin(run: Path) -> bool:
    """Let prunes consider ``run`` again; False when it was not pinned."""
    results.load(run)
    try:
        (Path(run) / PIN_FILE).unlink()
    except FileNotFoundError:
        return False
    return True
