"""``hvnet exporter``: the figures of :mod:`.metrics` served to Prometheus over HTTP.

prometheus-client's own server (a thread per request) serves ``/metrics``;
each scrape calls :meth:`.metrics.Collector.collect`, so what Prometheus
stores is what the switch said at that moment.  The endpoint has neither
authentication nor TLS, and the metrics name every VM, so it listens on the
loopback by default and binds another address only when told twice (the
address and ``allow_remote``).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import ConflictError, UsageError
from .metrics import Collector

log = logging.getLogger("hvnet.exporter")

DEFAULT_LISTEN = "127.0.0.1:9477"
LISTEN_FORMS = "HOST:PORT or [IPv6]:PORT, HOST an IP address or localhost, PORT 0-65535 (0: any free port)"


@dataclass(frozen=True)
class Listen:
    """Where the exporter listens."""

    address: str  # an IP literal (IPv6 without brackets) or "localhost"
    port: int

    @property
    def loopback(self) -> bool:
        return self.address == "localhost" or ipaddress.ip_address(self.address).is_loopback

    def url(self, port: Optional[int] = None) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port if port is None else port}/metrics"


def parse_listen(text: str, origin: str = "--listen") -> Listen:
    """``127.0.0.1:9477``, ``[::1]:9477``, ``localhost:9477`` -> :class:`Listen`; else a usage error (``origin``)."""

    def bad(why: str) -> UsageError:
        return UsageError(f"{origin}: {text!r}: {why}; allowed: {LISTEN_FORMS}")

    if text.startswith("["):
        address, sep, port = text[1:].partition("]:")
        if not sep:
            raise bad("an IPv6 address in brackets must be followed by :PORT")
        try:
            if ipaddress.ip_address(address).version != 6:
                raise bad("only an IPv6 address goes in brackets")
        except ValueError:
            raise bad(f"{address!r} is not an IPv6 address") from None
    else:
        address, sep, port = text.rpartition(":")
        if not sep or not address:
            raise bad("no HOST:PORT")
        if address != "localhost":
            try:
                if ipaddress.ip_address(address).version != 4:
                    raise bad("put an IPv6 address in brackets")
            except ValueError:
                raise bad(f"{address!r} is not an IP address") from None
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        raise bad(f"port {port!r} is not a number 0-65535")
    return Listen(address, int(port))


def require_allowed(listen: Listen, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless the operator also said ``--allow-remote``."""
    if not listen.loopback and not allow_remote:
        raise UsageError(
            f"--listen {listen.address}: not a loopback address; the metrics name every VM and the "
            "endpoint has no authentication",
            hint="pass --allow-remote as well to listen there (and firewall it), or keep 127.0.0.1",
        )


class _Families:
    """The prometheus-client collector: one scrape of the :class:`Collector` as metric families."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def describe(self) -> list[Any]:
        return []  # collect() runs only on a scrape, never when the registry is built

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for fam in self.collector.collect():
            if fam.type == "counter":
                out: Any = CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=fam.labels)
            else:
                out = GaugeMetricFamily(fam.name, fam.help, labels=fam.labels)
            for labels, value in fam.samples:
                out.add_metric(list(labels), value)
            yield out


class Server:
    """The HTTP server and its collector; :meth:`close` stops both."""

    def __init__(self, collector: Collector, listen: Listen, *, allow_remote: bool = False) -> None:
        require_allowed(listen, allow_remote)
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.process_collector import ProcessCollector

        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(collector))  # type: ignore[arg-type]
        ProcessCollector(registry=self.registry)  # the exporter's own CPU and memory (process_*)
        try:
            self.httpd, self.thread = start_http_server(listen.port, listen.address, registry=self.registry)
        except OSError as exc:
            raise ConflictError(
                f"cannot listen on {listen.url()}: {exc.strerror or exc}",
                hint="another process holds that port, or the address is not on this host: choose another --listen",
            ) from None
        self.port = int(self.httpd.server_address[1])
        self.url = listen.url(self.port)
        collector.start()

    def close(self) -> None:
        self.collector.stop()
        self.httpd.shutdown()
        self.httpd.server_close()
