"""The policy engine a front end works with, opened on a Host's switch, and what the agent asks of it.

Every policy verb (:mod:`.policy`, :mod:`.confirm`, :mod:`.mirrors`) takes an
open :class:`~appliance.policy.PolicyEngine`, not a connection and a Host:
the engine is what a front end keeps for its whole life (the console holds
one on its long-lived connection; the CLI one per command), it carries the
Host, the journal and the resolved VM names, and building one per verb would
look the names up again each time.  A front end gets its engine from
:func:`open_engine` (the CLI, the console, the agent alike), never builds one.

The agent enforces through the same engine; what it needs besides -- the
OVSDB lock it holds (:data:`AGENT_LOCK`), the collector of orphaned rows,
whether ovs-vswitchd restarted, whether the kernel polices with tc -- is
named here too, so it depends on the services and not on the engine's inside.
"""

from __future__ import annotations

from typing import Optional

from appliance.core.ovsdb import Connection
from appliance.policy import PolicyEngine
from appliance.policy.apply import tcpolice
from appliance.policy.apply.engine import AGENT_LOCK
from appliance.policy.apply.orphans import Collector as OrphanCollector
from appliance.policy.apply.read import COLUMNS
from appliance.switch.host import Host

# What the agent uses besides the engine, named here so that it depends on this module.
__all__ = ["AGENT_LOCK", "OrphanCollector", "PolicyEngine", "connect", "open_engine", "tc_police", "vswitchd_pid"]


def connect(host: Host, *, timeout: float = 5.0, statistics: bool = True) -> Connection:
    """An OVSDB connection to ``host``'s switch holding the columns the policy engine reads.

    ``statistics=False`` leaves out the counters, which change every few
    seconds: a process that only enforces the policy (the agent) is not
    woken by every one of them.
    """
    columns = COLUMNS if statistics else {t: [c for c in cols if c != "statistics"] for t, cols in COLUMNS.items()}
    return host.connect(columns, timeout=timeout)


def open_engine(
    host: Host,
    command: str,
    *,
    conn: Optional[Connection] = None,
    timeout: float = 5.0,
    policing: Optional[str] = None,
    pool: bool = False,
    enforcing: bool = False,
) -> PolicyEngine:
    """The policy engine every policy verb takes, on ``host``'s switch; ``command`` is what
    its audit lines and records say made the change (the command line, ``hvnet tui``).

    Without ``conn`` the engine opens its own connection and closes it when
    used as a context manager (``with open_engine(host, cmd) as eng:``: the
    CLI's one engine per command).  With ``conn`` it works on a connection
    the front end keeps for its whole life (the console's, the agent's),
    which the front end closes itself: such an engine is not used in a
    ``with``.

    ``policing`` forces the ingress mechanism (``--policing``); ``pool``: this
    host is one of several given one policy (see ``PlanOptions.pool``);
    ``enforcing``: the agent's mode -- a VIF that cannot take its rule now
    does not stop the others, and a pass that changes nothing is not audited.
    """
    if conn is None:
        conn = connect(host, timeout=timeout)
    engine = PolicyEngine(conn, host, command=command)
    engine.pool = pool
    if policing:
        engine.force_policing = policing
    if enforcing:
        engine.lenient = True
        engine.audit_unchanged = False  # a pass that found nothing to do is not an event worth a line
    return engine


def vswitchd_pid(engine: PolicyEngine) -> Optional[int]:
    """The pid of the ovs-vswitchd the engine's OpenFlow meters live in (None: no OpenFlow side, or none
    running): a new pid means it restarted and forgot them."""
    return engine.of.vswitchd_pid() if engine.of is not None else None


def tc_police(host: Host) -> tcpolice.PoliceAnswer:
    """Whether ``host``'s kernel enforces tc's police action (probed once per boot, then cached), and
    whether that answer is the kernel's own (cached) or a "no" for now because the probe could not run."""
    return tcpolice.tc_police(host.runner, host.paths.cache_dir)
