"""OVN pools: ``hvnet --pool NAME``, the pool's logical network read from its central databases.

A pool is an inventory entry (:class:`~appliance.hosts.InventoryPool`): its
northbound and southbound remotes, reached directly (``unix:``, ``tcp:``,
``ssl:``) or as unix sockets on an inventory host over that host's SSH
master (``via``), like a hypervisor's own OVSDB.  The NB and SB say which
chassis binds each port; the VM behind a port is on that chassis (the VIF
whose ``external_ids:iface-id`` names the port), so the pool's chassis
hosts are read in parallel too, and a chassis that cannot be read is named
in the view's notes rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import api
from ..errors import EXIT_OK, UsageError
from ..host import Host
from ..hosts import Inventory, InventoryHost, InventoryPool
from ..ovn.read import read_pool
from ..ovn.view import PoolView
from ..target import DbTarget, SslOptions
from . import fleet

Connect = Callable[[InventoryHost], Host]


def targets(pool: InventoryPool, inventory: Inventory, connect: Connect,
            ssl: SslOptions | None = None) -> tuple[DbTarget, DbTarget, Host | None]:  # fmt: skip
    """The pool's NB and SB targets, and the host they are forwarded through (to close) if ``via``."""
    source = f"--pool {pool.name}"
    if pool.via is None:
        for remote in (pool.nb, pool.sb):
            if remote.startswith("ssl:") and ssl is None:
                raise UsageError(f"--pool {pool.name}: {remote} needs --ssl-key, --ssl-cert and --ssl-ca")
        return (DbTarget(pool.nb, source, ssl if pool.nb.startswith("ssl:") else None),
                DbTarget(pool.sb, source, ssl if pool.sb.startswith("ssl:") else None), None)  # fmt: skip
    entry = inventory.get(pool.via)
    if entry is None:
        raise UsageError(f"--pool {pool.name}: via {pool.via!r} is not a host of {inventory.file}")
    host = connect(entry)
    try:
        session = getattr(host.runner, "session", None)
        if session is None:
            raise UsageError(f"--pool {pool.name}: via {pool.via} is not reached over SSH")
        out = []
        for db, remote in (("nb", pool.nb), ("sb", pool.sb)):
            path = remote.removeprefix("unix:")
            local = Path(session.work_dir) / f"ovn-{db}.sock"
            session.forward_unix(local, path)
            out.append(DbTarget(f"unix:{local}", source, where=f"{path} on {pool.via}"))
    except BaseException:
        host.close()
        raise
    return out[0], out[1], host


def status(pool: InventoryPool, inventory: Inventory, connect: Connect, *, timeout: float = 5.0,
           ssl: SslOptions | None = None, vms: bool = True) -> PoolView:  # fmt: skip
    """The pool as its NB and SB say now; with ``vms`` the VM behind each bound port, from its chassis."""
    nb, sb, via = targets(pool, inventory, connect, ssl)
    try:
        view = read_pool(pool.name, nb, sb, timeout)
    finally:
        if via is not None:
            via.close()
    if vms and pool.chassis:
        _name_vms(view, inventory.select(pool.chassis), connect, timeout)
    return view


def _name_vms(view: PoolView, chassis: list[InventoryHost], connect: Connect, timeout: float) -> None:
    """Each port's VM, from the chassis hosts' own inventories (read in parallel)."""

    def work(host: Host, _entry: InventoryHost) -> tuple[dict[str, str], int]:
        inv = api.read_inventory_once(host, timeout=timeout)
        return {v.ovn_port: v.vm_name or v.vm_uuid or "" for v in inv.vifs if v.ovn_port}, EXIT_OK

    names: dict[str, str] = {}
    for outcome in fleet.run(chassis, work, connect, deadline_s=max(30.0, 6 * timeout)):
        if outcome.value is None:
            view.notes.append(f"VMs on {outcome.name} not read: {outcome.error or 'no result'}")
        else:
            names.update(outcome.value)
    for _, port in view.ports():
        port.vm = names.get(port.name)
