"""VM names from XAPI (XenServer, XCP-ng), through the ``XenAPI`` package.

One logged-in session per XAPI URL, kept and reused; every network operation
bounded by the configured timeout; one ``VM.get_all_records_where`` call per
lookup; a failure logged once per episode and answered with no names, so the
other sources and the inventory carry on.  Loaded only where XAPI is
configured (:func:`appliance.switch.names.default_sources`).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.parse
import xmlrpc.client
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import XenAPI

from appliance.core import trusted
from appliance.core.errors import UsageError
from appliance.core.validate import sha256_fingerprint, xapi_url

log = logging.getLogger("hvnet.names")


DEFAULT_XAPI_TIMEOUT = 3.0
# XAPI's own socket in a dom0 (XenAPI.xapi_local() reaches it the same way).  xapi treats a request on it as
# pre-authenticated root (Context.preauth = `root in xapi_session.ml): login_with_password is not checked
# against any password there, and the socket is root's alone.
LOCAL_SOCKET = "/var/lib/xcp/xapi"
LOCAL_HINT = (
    "hvnet asks XAPI through dom0's local socket when it runs there as root with no XAPI URL set; "
    "elsewhere set xapi_url and xapi_credentials"
)


@dataclass(frozen=True)
class XapiConfig:
    """Where XAPI is and how to log in: its URL (``https://pool-master``), a file
    holding ``user:password`` (read at each login, so a changed password is
    picked up), the time any one network operation may take, and how its https
    certificate is trusted: the system's CA store, a CA file (``ca_file``), or
    only the certificate whose SHA-256 fingerprint is ``fingerprint`` (XenServer's
    own self-signed one)."""

    url: str
    credentials_file: str
    timeout: float = DEFAULT_XAPI_TIMEOUT
    ca_file: str | None = None
    fingerprint: str | None = None  # 64 lowercase hex digits

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XapiConfig | None:
        """``$HVNET_XAPI_URL``, ``$HVNET_XAPI_CREDENTIALS`` and the optional
        ``$HVNET_XAPI_TIMEOUT`` (seconds), ``$HVNET_XAPI_CA`` and
        ``$HVNET_XAPI_FINGERPRINT`` from ``env``; None unless both of the first
        two are set.  The front door has refused a URL with credentials in it
        and a malformed fingerprint (:func:`appliance.frontdoor.hosts.check_xapi`)."""
        url = env.get("HVNET_XAPI_URL")
        cred_file = env.get("HVNET_XAPI_CREDENTIALS")
        if not url or not cred_file:
            return None
        timeout = DEFAULT_XAPI_TIMEOUT
        raw = env.get("HVNET_XAPI_TIMEOUT")
        if raw:
            try:
                timeout = float(raw)
                if not 0 < timeout <= 300:
                    raise ValueError(raw)
            except ValueError:
                log.warning("HVNET_XAPI_TIMEOUT=%r is not a number of seconds in (0, 300]; using %s", raw, timeout)
                timeout = DEFAULT_XAPI_TIMEOUT
        pin = env.get("HVNET_XAPI_FINGERPRINT") or None
        return cls(url, cred_file, timeout, env.get("HVNET_XAPI_CA") or None, pin and sha256_fingerprint(pin))


def local_config(socket_path: str = LOCAL_SOCKET, timeout: float = DEFAULT_XAPI_TIMEOUT) -> XapiConfig:
    """XAPI through a dom0's local socket: root, no password (see :data:`LOCAL_SOCKET`)."""
    return XapiConfig(f"unix:{socket_path}", "", timeout)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket at ``path``, every socket operation bounded by the timeout."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    """xmlrpc's transport to XAPI's local socket (what XenAPI's UDSTransport does, with a timeout)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__()
        self.path = path
        self.timeout = timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        if self._connection and host == self._connection[0]:
            return self._connection[1]
        conn = _UnixConnection(self.path, self.timeout)
        self._connection = host, conn
        return conn


class _TimeoutTransport(xmlrpc.client.Transport):
    """xmlrpc's HTTP transport with a timeout on every socket operation (connect, send, receive)."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        conn = super().make_connection(host)
        conn.timeout = self.timeout
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout)
        return conn


class _PinnedConnection(http.client.HTTPSConnection):
    """An https connection that accepts only the certificate with the SHA-256 fingerprint ``pin``,
    compared as soon as the handshake is done, before a byte of the request (the password) is sent."""

    pin = ""

    def connect(self) -> None:
        super().connect()
        der = self.sock.getpeercert(binary_form=True) or b""
        got = hashlib.sha256(der).hexdigest()
        if not hmac.compare_digest(got, self.pin):
            self.sock.close()
            self.sock = None
            raise ssl.SSLCertVerificationError(
                f"certificate fingerprint {_colons(got)} is not the configured {_colons(self.pin)}"
            )


def _colons(hexdigits: str) -> str:
    return ":".join(hexdigits[i : i + 2] for i in range(0, len(hexdigits), 2)).upper()


class _TimeoutSafeTransport(xmlrpc.client.SafeTransport):
    """The same for https: the certificate checked against the system's CA store, a CA file, or a pinned
    fingerprint (see :func:`tls_context`)."""

    def __init__(self, timeout: float, context: ssl.SSLContext | None = None, pin: str | None = None) -> None:
        super().__init__(context=context)
        self.timeout = timeout
        self.pin = pin

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        if self.pin is None:
            conn = super().make_connection(host)
        elif self._connection and host == self._connection[0]:
            conn = self._connection[1]
        else:
            chost, self._extra_headers, _x509 = self.get_host_info(host)
            conn = type("Pinned", (_PinnedConnection,), {"pin": self.pin})(chost, context=self.context)
            self._connection = host, conn
        conn.timeout = self.timeout
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout)
        return conn


def tls_context(ca_file: str | None, pinned: bool) -> ssl.SSLContext:
    """How XAPI's certificate is trusted: the CA file's certificates (else the system's store), the
    host name checked; with a pinned fingerprint and no CA file the fingerprint alone decides
    (a self-signed certificate names no CA, and often not the address it is reached at).

    The CA file is read like the credentials (:func:`appliance.core.trusted.read`): whoever could
    write it could have hvnet send the pool's password to a server of their own."""
    cadata = trusted.read(ca_file, "the XAPI CA file", max_bytes=1024 * 1024)[0] if ca_file else None
    context = ssl.create_default_context(cadata=cadata)
    if pinned and ca_file is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _transport(url: str, timeout: float, ca_file: str | None = None, pin: str | None = None) -> xmlrpc.client.Transport:
    if url.startswith("unix:"):
        return _UnixTransport(url[len("unix:") :], timeout)
    if urllib.parse.urlsplit(url).scheme == "https":
        return _TimeoutSafeTransport(timeout, tls_context(ca_file, pin is not None), pin)
    return _TimeoutTransport(timeout)


def insecure_warning(url: str, source: str) -> str | None:
    """What to tell the operator about an ``http://`` XAPI URL (None for https), worded as for a
    ``tcp:`` OVSDB target."""
    if urllib.parse.urlsplit(url).scheme != "http":
        return None
    safe = "https://" + url[len("http://") :]
    return (
        f"{url} (from {source}) is plain HTTP: the pool's user and password are sent unencrypted, "
        f"so anyone who can see that traffic can log in to the pool; use {safe}, with xapi_ca or "
        "xapi_fingerprint for XenServer's self-signed certificate"
    )


class _Unusable(Exception):
    """XAPI cannot be asked now; ``kind`` groups failures into episodes, the message says why."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


class XapiNames:
    """VM name labels through XAPI (XenServer / XCP-ng), with the ``XenAPI`` package.

    One session, logged in on the first lookup and reused by every later one
    (see :func:`xapi_source` for the one per configuration a process keeps);
    XenAPI logs in again by itself when XAPI answers ``SESSION_INVALID`` (a
    toolstack restart, an expired session) and retries the call (a session still
    invalid after three logins is a failure like any other).  A lookup is
    one ``VM.get_all_records_where`` call for every VM that is not a template.

    Every network operation is bounded by ``timeout``, and a lookup never waits
    for another one in flight longer than that, so a hung XAPI costs inventory
    at most about ``timeout``.  After a failure, lookups answer ``{}`` at once
    for :attr:`retry_s` seconds instead of asking again; the failure is logged
    as a warning once, with its reason, and again only when the reason changes
    or after XAPI has answered in between.
    """

    name = "xapi"
    retry_s = 30.0
    originator = "hvnet"
    vm_filter = 'field "is_a_template" = "false"'

    def __init__(
        self,
        url: str,
        user: str | None = None,
        password: str | None = None,
        *,
        credentials_file: str | None = None,
        timeout: float = DEFAULT_XAPI_TIMEOUT,
        retry_s: float | None = None,
        ca_file: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        self.local = url.startswith("unix:")
        if self.local:  # dom0's own socket: xapi logs root in without a password there
            user, password, credentials_file = "root", "", None
        elif (user is None) == (credentials_file is None):
            raise ValueError("XapiNames needs either user and password or a credentials file")
        else:
            xapi_url(url)  # never credentials in the URL: it is in every log line about this source
        self.url = url
        self.user = user
        self.password = password or ""
        self.credentials_file = credentials_file
        self.timeout = timeout
        self.ca_file = ca_file
        self.fingerprint = fingerprint and sha256_fingerprint(fingerprint)
        if retry_s is not None:
            self.retry_s = retry_s
        self._lock = threading.Lock()
        self._session: Any = None  # XenAPI.Session, logged in
        self._failed_at: float | None = None
        self._failure_kind: str | None = None  # set while failing: the kind last warned about

    @classmethod
    def from_config(cls, config: XapiConfig) -> XapiNames:
        if config.url.startswith("unix:"):
            return cls(config.url, timeout=config.timeout)
        return cls(config.url, credentials_file=config.credentials_file, timeout=config.timeout,
                   ca_file=config.ca_file, fingerprint=config.fingerprint)  # fmt: skip

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XapiNames | None:
        """The shared source for the configuration in ``env`` (see :meth:`XapiConfig.from_env`), or None."""
        config = XapiConfig.from_env(env)
        return xapi_source(config) if config is not None else None

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]:
        wanted = set(vm_uuids)
        if not wanted:
            return {}
        # A lookup in flight holds the lock for at most about ``timeout``.
        if not self._lock.acquire(timeout=self.timeout):
            return {}
        try:
            now = time.monotonic()
            if self._failed_at is not None and now - self._failed_at < self.retry_s:
                return {}
            try:
                vm_names = self._vm_names()
            except _Unusable as exc:
                self._failed(exc)
                return {}
            if self._failure_kind is not None:
                log.info("XAPI at %s answers again", self.url)
            self._failed_at = self._failure_kind = None
            return {u: n for u, n in vm_names.items() if u in wanted}
        finally:
            self._lock.release()

    def _vm_names(self) -> dict[str, str]:
        """``{uuid: name_label}`` of every VM that is not a template; :class:`_Unusable` when XAPI cannot say."""
        try:
            if self._session is None:
                try:
                    transport = _transport(self.url, self.timeout, self.ca_file, self.fingerprint)
                except (UsageError, UnicodeDecodeError, OSError) as exc:  # ssl.SSLError: no certificate in it
                    raise _Unusable("tls", f"CA file {self.ca_file}: {exc}") from None
                # a unix socket has no host: XenAPI needs an http URI, the transport says where it goes
                session = XenAPI.Session("http://localhost/" if self.local else self.url, transport=transport)
                user, password = self._credentials()
                session.xenapi.login_with_password(user, password, "1.0", self.originator)
                self._session = session
            records = self._session.xenapi.VM.get_all_records_where(self.vm_filter)
            return {r["uuid"]: r["name_label"] for r in records.values()}
        except XenAPI.Failure as exc:
            code = exc.details[0] if exc.details else ""
            if code == "SESSION_AUTHENTICATION_FAILED":
                raise _Unusable("auth", f"authentication failed for user {self.user!r}") from exc
            raise _Unusable(f"failure {code}", f"XAPI refused: {exc}") from exc
        except xmlrpc.client.Fault as exc:
            if exc.faultCode == 504:  # XenAPI's word for a login that timed out (ETIMEDOUT)
                raise _Unusable("timeout", f"no answer within {self.timeout:g} s") from exc
            # 500: a session that stays invalid however often XenAPI logs in again
            raise _Unusable("protocol", f"XAPI fault {exc.faultCode}: {exc.faultString}") from exc
        except (socket.timeout, TimeoutError) as exc:
            raise _Unusable("timeout", f"no answer within {self.timeout:g} s") from exc
        except ssl.SSLError as exc:
            raise _Unusable("tls", f"TLS failed: {exc}") from exc
        except (FileNotFoundError, PermissionError) as exc:
            if not self.local:
                raise _Unusable("unreachable", f"unreachable: {exc}") from exc
            path = self.url[len("unix:") :]
            if isinstance(exc, FileNotFoundError):
                raise _Unusable("unreachable", f"no socket at {path} (is xapi running?)") from exc
            raise _Unusable("unreachable", f"permission denied on {path}: only root may use it") from exc
        except OSError as exc:
            raise _Unusable("unreachable", f"unreachable: {exc}") from exc
        except (xmlrpc.client.Error, http.client.HTTPException, ValueError, KeyError, TypeError, AttributeError) as exc:
            # an HTTP error status (ProtocolError), a reply that is not XML-RPC or not XAPI's records
            raise _Unusable("protocol", f"unexpected answer: {exc}") from exc

    def _credentials(self) -> tuple[str, str]:
        if self.credentials_file is None:
            return self.user or "", self.password
        try:  # a file another user could write would choose whose password root sends where
            text = trusted.read(self.credentials_file, "the XAPI credentials", max_bytes=4096)[0]
        except trusted.UntrustedFile as exc:
            raise _Unusable("credentials", exc.message) from None
        except (OSError, UnicodeDecodeError, UsageError) as exc:
            raise _Unusable("credentials", f"cannot read credentials {self.credentials_file}: {exc}") from None
        user, _, password = text.strip().partition(":")
        self.user = user
        return user, password

    def _failed(self, exc: _Unusable) -> None:
        self._failed_at = time.monotonic()
        if exc.kind in ("auth", "credentials", "protocol"):
            # XenAPI would log in again with the credentials it was given: the next try
            # reads them afresh.  A timeout or an unreachable host keeps the session:
            # it is still valid when XAPI comes back (if not, XAPI says SESSION_INVALID).
            self._session = None
        report = log.warning if exc.kind != self._failure_kind else log.debug
        if self.local:
            report("XAPI through dom0's socket %s (as root, no password) not usable: %s; VMs keep their uuids, "
                   "next try in %g s (%s)", self.url[len("unix:"):], exc, self.retry_s, LOCAL_HINT)  # fmt: skip
        else:
            report("XAPI at %s not usable: %s; VMs keep their uuids, next try in %g s", self.url, exc, self.retry_s)
        self._failure_kind = exc.kind

    def close(self) -> None:
        """Log out (best effort, bounded by the timeout); the next lookup logs in again."""
        with self._lock:
            session, self._session = self._session, None
            if session is not None:
                try:
                    session.xenapi.session.logout()
                except Exception:  # XAPI gone or the session expired: nothing left to end
                    pass


_xapi_lock = threading.Lock()
_xapi_sources: dict[XapiConfig, XapiNames] = {}


def xapi_source(config: XapiConfig) -> XapiNames:
    """The one :class:`XapiNames` of this process for ``config`` (its session is shared)."""
    with _xapi_lock:
        if config not in _xapi_sources:
            _xapi_sources[config] = XapiNames.from_config(config)
        return _xapi_sources[config]
