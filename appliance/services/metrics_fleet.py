"""``hvnet exporter --hosts``: one scrape covers many hypervisors, each collected on its own.

Each host gets its own :class:`~.scrape.Collector` on its own Host (one SSH
master), opened on the first scrape and kept.  A scrape collects every host
in parallel and waits at most its deadline: a host that cannot be reached,
or is still busy from an earlier scrape (a hung SSH connection), is exported
as ``hvnet_up{host=NAME} 0`` with the reason counted, and never holds the
other hosts' figures back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.services.metrics import Families
from appliance.services.scrape import Collector
from appliance.switch.host import Host

log = logging.getLogger("hvnet.exporter")
Opener = Callable[[str, float], Host]  # (inventory name, timeout) -> an open Host


class _HostSlot:
    """One host: its collector once opened, the collection under way, its own error counts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.collector: Optional[Collector] = None
        self.running: Optional[Future[Families]] = None
        self.errors: dict[str, int] = {}


class FleetCollector:
    """The :class:`Collector` interface (start, stop, collect) over several hosts."""

    host_label = True  # one scrape, many switches: every series says whose it is

    def __init__(
        self,
        policies: Mapping[str, Optional[str]],
        opener: Opener,
        *,
        timeout: float = 2.0,
        deadline: Optional[float] = None,
        **options: Any,
    ) -> None:
        """``policies``: each host's name and the policy file whose drift is exported for it (or None);
        ``timeout``: each connection and OVSDB call; ``deadline``: the whole scrape (default: twice the
        timeout, the schema and the read, plus a second for the answer)."""
        self.policies = dict(policies)
        self.slots = [_HostSlot(n) for n in policies]
        self.opener = opener
        self.timeout = timeout
        self.options = options
        self.deadline = 2 * timeout + 1.0 if deadline is None else deadline
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(self.slots))), thread_name_prefix="hvnet-scrape")
        self._lock = threading.Lock()

    def start(self) -> None:
        """Hosts are opened on the first scrape, so a host down at start-up does not stop the exporter."""

    def stop(self) -> None:
        for slot in self.slots:
            if slot.collector is not None:
                slot.collector.stop()
        self.pool.shutdown(wait=False)

    def _one(self, slot: _HostSlot) -> Families:
        """The host's families; (re)opens the host when it has none or its connection is gone."""
        c = slot.collector
        if c is not None and c.host.link is not None and not c.host.link.alive():
            c.host.link.reconnect()  # HvnetError when it cannot: this scrape says so
        if c is None:
            host = self.opener(slot.name, self.timeout)
            c = slot.collector = Collector(
                host, timeout=self.timeout, deadline=self.deadline, policy=self.policies[slot.name], **self.options
            )
            c.name = slot.name
            c.start()
        return c.collect()

    def collect(self) -> Families:
        with self._lock:
            out = Families()
            for slot in self.slots:
                if slot.running is not None and slot.running.done():
                    slot.running = None  # finished after an earlier scrape gave up on it: too old to export
                if slot.running is None:
                    slot.running = self.pool.submit(self._one, slot)
            end = time.monotonic() + self.deadline
            for slot in self.slots:
                fams = self._result(slot, max(0.0, end - time.monotonic()))
                if fams is None:
                    out.add("hvnet_up", (slot.name,), 0)
                    for stage, n in sorted(slot.errors.items()):
                        out.add("hvnet_exporter_scrape_errors_total", (slot.name, stage), n)
                    continue
                for fam in fams:
                    for labels, value in fam.samples:
                        out.add(fam.name, labels, value)
            return out

    def _result(self, slot: _HostSlot, wait: float) -> Optional[Families]:
        """The host's families, or None (counted by reason) when it has none within ``wait``."""
        future = slot.running
        if future is None:
            return None
        try:
            fams = future.result(timeout=wait)
        except FutureTimeout:
            slot.errors["busy"] = slot.errors.get("busy", 0) + 1
            log.warning("%s: no figures within %.1f s; still collecting", slot.name, self.deadline)
            return None
        except HvnetError as exc:
            slot.running = None
            slot.errors["connect"] = slot.errors.get("connect", 0) + 1
            log.warning("%s: %s", slot.name, exc.message)
            return None
        slot.running = None
        if slot.errors:  # the host's own collector counts from now on; keep what happened before it
            for stage, n in slot.errors.items():
                fams.add("hvnet_exporter_scrape_errors_total", (slot.name, f"fleet-{stage}"), n)
        return fams
