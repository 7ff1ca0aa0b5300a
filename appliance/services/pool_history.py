"""What hvnet remembers of its applies on an OVN pool: the audit lines and the record rollback undoes.

A pool's records sit beside a host's (:class:`~appliance.policy.journal.Journal`,
the same files, flushed to disk the same way) in ``STATE_DIR/pools/NAME``,
and its audit lines go to the same audit log, with target ``ovn-pool:NAME``.
A record holds the plan's lines and the values the apply replaced
(:func:`appliance.ovn.plan.undo`), so ``hvnet --pool NAME rollback`` is
planned and committed like any apply and leaves alone what the apply did
not touch.
"""

from __future__ import annotations

from typing import Any

from ..host import DataPaths
from ..ovn.plan import PoolPlan, undo
from ..ovn.view import PoolView
from ..ovn.write import Acks
from ..policy import journal as jr


def pool_journal(name: str, paths: DataPaths) -> jr.Journal:
    """The pool's journal: its records under ``paths.state_dir/pools/NAME``, lines in ``paths.audit_log``."""
    return jr.Journal(target(name), paths.state_dir / "pools" / name, paths.audit_log)


def target(name: str) -> str:
    return f"ovn-pool:{name}"


def record(journal: jr.Journal, command: str, view: PoolView, plan: PoolPlan) -> dict[str, Any]:
    """The record of an apply about to be committed: its changes and what they replace."""
    rec = jr.new_record(journal.remote, command, [])
    rec["changes"] = plan.lines()
    rec["undo"] = undo(view, plan).to_json()
    rec["nb_cfg_before"] = view.nb_cfg
    return rec


def result(nb_cfg: int | None, acks: Acks | None) -> str:
    """The audit line's result: committed, and whether every chassis acknowledged it."""
    if acks is None:
        return f"committed (nb_cfg {nb_cfg}); acknowledgements not read"
    if acks.complete:
        return f"applied (nb_cfg {nb_cfg}, every chassis acknowledged in {acks.seconds * 1000:.0f} ms)"
    return f"committed (nb_cfg {nb_cfg}); not acknowledged within {acks.seconds:.0f} s by {', '.join(acks.behind)}"
