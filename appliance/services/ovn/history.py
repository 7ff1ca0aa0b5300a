"""What hvnet remembers of its applies on an OVN pool: the audit lines and the record rollback undoes.

A pool's records sit beside a host's (:class:`~appliance.policy.apply.journal.Journal`,
the same files, flushed to disk the same way) in ``STATE_DIR/pools/NAME``,
and its audit lines go to the same audit log, with target ``ovn-pool:NAME``.
An intent is written before each commit, and the commit itself marks
the NB (``NB_Global.external_ids:hvnet-last-commit``), so a process killed
between the commit and its audit line is settled by the next one.
A record holds the plan's lines and the values the apply replaced
(:func:`appliance.ovn.plan.undo`), so ``hvnet --pool NAME rollback`` is
planned and committed like any apply and leaves alone what the apply did
not touch.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from appliance.ovn.plan import PoolPlan, undo
from appliance.ovn.view import PoolView
from appliance.ovn.write import Acks
from appliance.policy.apply import journal as jr
from appliance.switch.host import DataPaths


def pool_journal(name: str, paths: DataPaths) -> jr.Journal:
    """The pool's journal: its records under ``paths.state_dir/pools/NAME``, lines in ``paths.audit_log``."""
    return jr.Journal(target(name), paths.state_dir / "pools" / name, paths.audit_log)


def target(name: str) -> str:
    return f"ovn-pool:{name}"


def record(journal: jr.Journal, command: str, view: PoolView, plan: PoolPlan,
           undoes: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The record of an apply (or, ``undoes``, a rollback) about to be committed: its changes, what they
    replace, and the NB's commit marker before it (to tell, after a crash, whether it was committed)."""
    rec = jr.new_record(journal.remote, command, [])
    rec["changes"] = plan.lines()
    rec["undo"] = undo(view, plan).to_json()
    rec["marker_before"] = view.commit_marker
    if undoes is not None:
        rec["undoes"] = undoes
    return rec


def settle(journal: jr.Journal, view: PoolView, command: str) -> list[str]:
    """Settle the applies and rollbacks of hvnet processes killed between their NB commit and their audit line.

    The NB's ``hvnet-last-commit`` says which: the intent's own id -- committed (an apply becomes the record
    rollback undoes; a rollback marks its apply rolled back); the marker it found before -- not committed;
    anything else -- unknown (an apply's record is kept, so rollback can still put its values back)."""
    said = []
    for rec in journal.interrupted():
        who = f"hvnet process {rec.get('pid')} ({rec.get('command')}) was interrupted"
        clean = {k: v for k, v in rec.items() if k not in ("pid", "keep")}
        last = journal.load_last()
        if view.commit_marker == rec["id"]:
            if rec.get("keep") and (last is None or last["id"] != rec["id"]):
                journal.save_last(clean)
            if rec.get("undoes") and last is not None and last["id"] == rec["undoes"]:
                journal.mark_rolled_back(last)
            text = f"applied ({who} after its commit; the chassis' acknowledgements were not awaited)"
        elif view.commit_marker == rec.get("marker_before"):
            text = f"not applied ({who} before its commit)"
        else:
            if rec.get("keep"):
                journal.save_last(clean)
            text = f"outcome unknown ({who}; the pool's NB has changed since)"
        journal.audit(str(rec.get("command")), [], text, record=rec["id"], settled_by=command, plan=rec["changes"])
        journal.clear_intent(rec["id"])
        said.append(f"{rec['id']}: {text}")
    return said


def checkpoint(stop_at: str | None, step: str) -> None:
    """A fault drill's stop (``$HVNET_STOP_AT``), as a host's apply has them: says so, stops with SIGSTOP."""
    if stop_at == step:
        sys.stderr.write(f"hvnet: stopped at {step} (pid {os.getpid()}); SIGCONT continues\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


def result(nb_cfg: int | None, acks: Acks | None) -> str:
    """The audit line's result: committed, and whether every chassis acknowledged it."""
    if acks is None:
        return f"committed (nb_cfg {nb_cfg}); acknowledgements not read"
    if acks.complete:
        return f"applied (nb_cfg {nb_cfg}, every chassis acknowledged in {acks.seconds * 1000:.0f} ms)"
    return f"committed (nb_cfg {nb_cfg}); not acknowledged within {acks.seconds:.0f} s by {', '.join(acks.behind)}"
