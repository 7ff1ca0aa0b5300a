"""VM names from XAPI (XenServer, XCP-ng), through the ``XenAPI`` package.

One logged-in session per XAPI URL, kept and reused; every network operation
bounded by the configured timeout; one ``VM.get_all_records_where`` call per
lookup; a failure logged once per episode and answered with no names, so the
other sources and the inventory carry on.  Loaded only where XAPI is
configured (:func:`appliance.names.default_sources`).
"""

from __future__ import annotations

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

log = logging.getLogger("hvnet.names")


DEFAULT_XAPI_TIMEOUT = 3.0


@dataclass(frozen=True)
class XapiConfig:
    """Where XAPI is and how to log in: its URL (``https://pool-master``), a file
    holding ``user:password`` (read at each login, so a changed password is
    picked up), and the time any one network operation may take."""

    url: str
    credentials_file: str
    timeout: float = DEFAULT_XAPI_TIMEOUT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XapiConfig | None:
        """``$HVNET_XAPI_URL``, ``$HVNET_XAPI_CREDENTIALS`` and the optional
        ``$HVNET_XAPI_TIMEOUT`` (seconds) from ``env``; None unless both of the
        first two are set."""
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
        return cls(url, cred_file, timeout)


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


class _TimeoutSafeTransport(xmlrpc.client.SafeTransport):
    """The same for https (the system's CA store verifies XAPI's certificate)."""

    def __init__(self, timeout: float, context: ssl.SSLContext | None = None) -> None:
        super().__init__(context=context)
        self.timeout = timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        conn = super().make_connection(host)
        conn.timeout = self.timeout
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout)
        return conn


def _transport(url: str, timeout: float) -> xmlrpc.client.Transport:
    if urllib.parse.urlsplit(url).scheme == "https":
        return _TimeoutSafeTransport(timeout)
    return _TimeoutTransport(timeout)


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
    ) -> None:
        if (user is None) == (credentials_file is None):
            raise ValueError("XapiNames needs either user and password or a credentials file")
        self.url = url
        self.user = user
        self.password = password or ""
        self.credentials_file = credentials_file
        self.timeout = timeout
        if retry_s is not None:
            self.retry_s = retry_s
        self._lock = threading.Lock()
        self._session: Any = None  # XenAPI.Session, logged in
        self._failed_at: float | None = None
        self._failure_kind: str | None = None  # set while failing: the kind last warned about

    @classmethod
    def from_config(cls, config: XapiConfig) -> XapiNames:
        return cls(config.url, credentials_file=config.credentials_file, timeout=config.timeout)

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
                session = XenAPI.Session(self.url, transport=_transport(self.url, self.timeout))
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
        except OSError as exc:
            raise _Unusable("unreachable", f"unreachable: {exc}") from exc
        except (xmlrpc.client.Error, http.client.HTTPException, ValueError, KeyError, TypeError, AttributeError) as exc:
            # an HTTP error status (ProtocolError), a reply that is not XML-RPC or not XAPI's records
            raise _Unusable("protocol", f"unexpected answer: {exc}") from exc

    def _credentials(self) -> tuple[str, str]:
        if self.credentials_file is None:
            return self.user or "", self.password
        try:
            with open(self.credentials_file, encoding="utf-8") as fh:
                user, _, password = fh.read().strip().partition(":")
        except OSError as exc:
            raise _Unusable("credentials", f"cannot read credentials {self.credentials_file}: {exc}") from exc
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
