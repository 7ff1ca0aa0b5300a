"""``hvnet exporter``: the figures of :mod:`.metrics` served to Prometheus over HTTP.

prometheus-client's WSGI application serves ``/metrics`` from a server of
our own: a thread per connection, at most :data:`MAX_CLIENTS` of them (one
more is answered 503 at once, never queued), each connection bounded by
:data:`CLIENT_TIMEOUT` seconds of silence, its TLS handshake made in its own
thread so a client that never finishes one holds nobody else.  Each scrape
calls :meth:`.scrape.Collector.collect`, which answers within its deadline.

The metrics name every VM, so the exporter listens on the loopback by
default and binds another address only when told twice (the address and
``allow_remote``) or when clients must show a certificate (``client_ca``).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from appliance.core.errors import ConflictError, UsageError
from appliance.services.scrape import Collector

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

    def url(self, port: Optional[int] = None, scheme: str = "http") -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{scheme}://{host}:{self.port if port is None else port}/metrics"


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


def require_allowed(listen: Listen, allow_remote: bool, tls: Optional[Tls] = None, origin: str = "--listen") -> None:
    """Refuse a non-loopback address unless the operator also said ``--allow-remote`` or clients must show
    a certificate signed by ``client_ca``."""
    if listen.loopback or allow_remote or (tls is not None and tls.client_ca is not None):
        return
    raise UsageError(
        f"{origin}: {listen.address}: not a loopback address; the metrics name every VM and the "
        "endpoint does not authenticate its clients",
        hint="set client_ca (and tls_cert, tls_key) so that only clients with a certificate are served, or pass "
        "--allow-remote as well (and firewall it), or keep 127.0.0.1",
    )


@dataclass(frozen=True)
class TlsFile:
    """One of the TLS files and where it was named (``flag --tls-cert``, ``/etc/hvnet/hvnet.conf:7``)."""

    path: str
    source: str


@dataclass(frozen=True)
class Tls:
    """HTTPS: the server's certificate and key and, when set, the CA whose certificates clients must show."""

    cert: TlsFile
    key: TlsFile
    client_ca: Optional[TlsFile] = None

    def context(self) -> ssl.SSLContext:
        """The server's TLS context (TLS 1.2 at least); a file that cannot be loaded is a usage error naming
        where it was set."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert.path, self.key.path)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"{self.cert.source}: {self.cert.path} with the key {self.key.path} ({self.key.source}): cannot "
                f"load: {_reason(exc)}",
                hint="tls_cert: a PEM certificate (chain); tls_key: its PEM private key, unencrypted",
            ) from None
        if self.client_ca is not None:
            try:
                ctx.load_verify_locations(self.client_ca.path)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(
                    f"{self.client_ca.source}: {self.client_ca.path}: cannot load: {_reason(exc)}",
                    hint="client_ca: the PEM certificate(s) of the CA that signs the clients' certificates",
                ) from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def tls_of(cert: Optional[TlsFile], key: Optional[TlsFile], client_ca: Optional[TlsFile]) -> Optional[Tls]:
    """The TLS settings as given, or None for plain HTTP; a key without its certificate (or the reverse), or
    a client CA without either, is a usage error naming what was given where."""
    if cert is None and key is None:
        if client_ca is not None:
            raise UsageError(
                f"{client_ca.source}: client_ca needs HTTPS: set tls_cert and tls_key as well",
                hint="client certificates are asked for in the TLS handshake",
            )
        return None
    if cert is None or key is None:
        given = cert or key
        assert given is not None
        missing = "tls_key (--tls-key)" if key is None else "tls_cert (--tls-cert)"
        raise UsageError(f"{given.source}: {given.path}: HTTPS needs both a certificate and its key; {missing} "
                         "is not set")  # fmt: skip
    return Tls(cert, key, client_ca)


class _Families:
    """The prometheus-client collector: one scrape of the :class:`Collector` as metric families.

    Every family's first label is ``host``; it is exposed only when the collector says so (its
    ``host_label``: a fleet, or another machine's switch).  An exporter of its own machine's switch is
    Prometheus' target for that machine, whose ``instance`` label already names it (Prometheus' target
    labels convention), so a ``host`` label there would only repeat it -- and change every series' identity
    when the machine is renamed.
    """

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.host_label = bool(collector.host_label)

    def describe(self) -> list[Any]:
        return []  # collect() runs only on a scrape, never when the registry is built

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cut = 0 if self.host_label else 1  # label position 0 is "host" in every family
        for fam in self.collector.collect():
            labels = fam.labels[cut:]
            if fam.type == "counter":
                out: Any = CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=labels)
            else:
                out = GaugeMetricFamily(fam.name, fam.help, labels=labels)
            for values, value in fam.samples:
                out.add_metric(list(values[cut:]), value)
            yield out


MAX_CLIENTS = 8  # connections served at once; Prometheus scrapes one at a time per target
CLIENT_TIMEOUT = 10.0  # seconds a connection may stay silent (handshake, request line, headers)
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Quiet(WSGIRequestHandler):
    """Requests are not logged: Prometheus makes one every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``MAX_CLIENTS``; TLS handshakes in those threads, under a timeout."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: int, tls: Optional[ssl.SSLContext]) -> None:
        self.address_family = family
        self.tls = tls
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Quiet)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self._busy(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(CLIENT_TIMEOUT)
            if self.tls is not None:
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError) as exc:  # no certificate, a wrong one, plain HTTP, silence
                    log.info("TLS handshake with %s refused: %s", client_address[0], _reason(exc))
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("connection from %s ended early", client_address[0])  # a timeout or a reset: not a traceback

    def _busy(self, request: Any) -> None:
        """Over the limit: 503 at once on plain HTTP (a TLS client cannot be answered before a handshake,
        which is not made here: it is only closed)."""
        try:
            if self.tls is None:
                request.settimeout(0.5)
                request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)


class Server:
    """The HTTP(S) server and its collector; :meth:`close` stops both."""

    def __init__(
        self, collector: Collector, listen: Listen, *, allow_remote: bool = False, tls: Optional[Tls] = None
    ) -> None:
        require_allowed(listen, allow_remote, tls)
        from prometheus_client import CollectorRegistry, make_wsgi_app
        from prometheus_client.process_collector import ProcessCollector

        context = tls.context() if tls is not None else None
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(collector))  # type: ignore[arg-type]
        ProcessCollector(registry=self.registry)  # the exporter's own CPU and memory (process_*)
        try:
            family = socket.getaddrinfo(listen.address, listen.port, type=socket.SOCK_STREAM,
                                        flags=socket.AI_PASSIVE)[0][0]  # fmt: skip
            self.httpd = _BoundedServer((listen.address, listen.port), family, context)
        except OSError as exc:
            raise ConflictError(
                f"cannot listen on {listen.url()}: {exc.strerror or exc}",
                hint="another process holds that port, or the address is not on this host: choose another --listen",
            ) from None
        self.httpd.set_app(make_wsgi_app(self.registry))
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hvnet-exporter-http", daemon=True)
        self.thread.start()
        self.port = int(self.httpd.server_address[1])
        self.url = listen.url(self.port, "https" if tls is not None else "http")
        collector.start()

    def close(self) -> None:
        self.collector.stop()
        self.httpd.shutdown()
        self.httpd.server_close()
