"""One connection to the Open_vSwitch database, through the OVSDB IDL.

hvnet talks to OVSDB as a database, never by parsing tool output:

* the schema is fetched from the server, so hvnet works with whatever OVS
  version the host runs, and only the columns hvnet reads are registered
  (a column the server lacks, e.g. ``Mirror.filter`` on older OVS, is simply
  not available -- see :meth:`Connection.has_column`);
* the IDL keeps an in-memory replica and reconnects by itself, with a short
  back-off so a restarted ovsdb-server is picked up within about a second;
* every user intent is one transaction: the caller's ``build`` function reads
  the replica, calls ``row.verify(column)`` on what its decision depends on
  and writes; on TRY_AGAIN (a concurrent change, or a reconnect) ``build`` is
  run again against fresh state, until a deadline;
* when ovs-vswitchd must have acted, the transaction increments
  ``next_cfg`` and we wait until ``cur_cfg`` catches up.

The IDL is single-threaded; a lock serialises it so that a background
run-loop (TUI, agent) and foreground transactions can share one connection.
"""

from __future__ import annotations

import codecs
import errno
import importlib.util
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from appliance.core import dbstream
from appliance.core.errors import ConflictError, HvnetError, OvsdbError, OvsdbUnreachable
from appliance.core.target import DbTarget

# The IDL (its replica, its transactions, its poller) is loaded by the first Connection: a
# one-shot read (``hvnet status``, a snapshot) speaks JSON-RPC on a stream of its own
# (:mod:`appliance.core.dbstream`) and needs none of it.
if TYPE_CHECKING:
    import ovs.db.idl

log = logging.getLogger("hvnet.ovsdb")

DB_NAME = "Open_vSwitch"

Columns = Mapping[str, Iterable[str]]
T = TypeVar("T")

# Reconnect back-off (ms).  The OVS default grows to 8 s; an appliance that
# must re-apply policy after an ovsdb-server restart wants to be back fast.
_MIN_BACKOFF_MS = 250
_MAX_BACKOFF_MS = 1000

# The largest reply a one-shot read accepts.  A select of every column hvnet reads on a
# 1000-VIF switch is about 1 MB (1,073,973 bytes on tests/bench's switch); this is room
# for a hundred of those, not for a server that never stops sending.
MAX_REPLY_BYTES = 128 << 20


def c_json_parser_in_use() -> bool:
    """True when the OVS C JSON parser (``ovs._json``) is in use.

    The pure-Python parser is several times slower on large databases (1000+
    ports); the set-up script links the distribution's build which has it.
    Once the IDL is loaded, ``ovs.json`` says which it took; before, whether
    the extension is installed is the answer: loading it to ask (it links
    OpenSSL, libbpf and unbound) was 3 ms of every ``hvnet status``, which
    reads the switch without the IDL and reports the parser all the same.
    """
    loaded = sys.modules.get("ovs.json")
    if loaded is not None:
        return getattr(loaded, "PARSER", None) == getattr(loaded, "PARSER_C", "C")
    try:
        return importlib.util.find_spec("ovs._json") is not None
    except ImportError:  # no python-ovs at all
        return False


def _configure_ssl(target: DbTarget) -> None:
    if target.ssl is not None:
        import ovs.stream

        ovs.stream.Stream.ssl_set_private_key_file(target.ssl.private_key)
        ovs.stream.Stream.ssl_set_certificate_file(target.ssl.certificate)
        ovs.stream.Stream.ssl_set_ca_cert_file(target.ssl.ca_cert)


def _unreachable(target: DbTarget, reason: str) -> OvsdbUnreachable:
    if target.source == "system default":
        hint = (
            "start Open vSwitch (systemctl start openvswitch-switch, or openvswitch on EL), "
            "bring up the lab with 'hvnet lab up', or pass --db / set HVNET_DB"
        )
    elif target.where is not None:
        hint = (
            "is ovsdb-server running there, with its socket at that path? If Open vSwitch keeps its run "
            "directory elsewhere, set it in the inventory (ovs_rundir) or HVNET_REMOTE_OVS_RUNDIR"
        )
    elif target.source == "lab":
        hint = "the lab's ovsdb-server is not answering: run 'hvnet lab down' then 'hvnet lab up'"
    else:
        hint = f"check that ovsdb-server listens on {target.remote}, or fix {target.source}"
    return OvsdbUnreachable(f"cannot reach OVSDB at {target.describe()}: {reason}", hint=hint)


def fetch_schema(target: DbTarget, timeout: float, db: str = DB_NAME) -> dict[str, Any]:
    """Ask the server for database ``db``'s schema (JSON; Open_vSwitch unless an OVN database), within
    ``timeout``."""
    return request(target, [("get_schema", [db])], timeout, db=db)[0]


def request(target: DbTarget, calls: list[tuple[str, list[Any]]], timeout: float, *, db: str = DB_NAME) -> list[Any]:
    """Send JSON-RPC ``calls`` (method, params) on one new stream, pipelined; their results in order.

    For one-shot reads (the schema, a snapshot's selects) where a replica
    would cost more than it saves.  The replies are decoded by the standard
    library's JSON decoder, not python-ovs's parser: for a 1000-VIF select
    (about 1 MB) that is ~10 ms instead of ~85 ms, all of it holding the GIL.
    """
    return results_of(target, exchange(target, calls, timeout), db=db)


def results_of(target: DbTarget, replies: list[dict[str, Any]], *, db: str = DB_NAME) -> list[Any]:
    """The ``result`` of each of :func:`exchange`'s ``replies``; an ``error`` reply (no such database) raises."""
    results = []
    for reply in replies:
        if reply.get("error") is not None:
            raise _unreachable(target, f"server has no {db} database ({reply['error']})")
        results.append(reply.get("result"))
    return results


def exchange(
    target: DbTarget, calls: list[tuple[str, list[Any]]], timeout: float, *, limit: int = MAX_REPLY_BYTES
) -> list[dict[str, Any]]:
    """The whole JSON-RPC replies (``result`` or ``error``) to ``calls``, in order, on one new stream, all
    within ``timeout``; a reply past ``limit`` bytes is an error (see :func:`_receive`)."""
    return Exchange(target, calls, timeout, limit=limit).replies()


class Exchange:
    """JSON-RPC ``calls`` sent on one new stream now, their replies read by :meth:`replies`.

    What the caller does in between runs while the server answers: ``hvnet
    status`` loads the inventory's code while the server writes a 1000-VIF
    select (tens of milliseconds each, on a machine with a core to spare).
    ``timeout`` counts from the send, as :func:`exchange`'s does.
    """

    def __init__(
        self, target: DbTarget, calls: list[tuple[str, list[Any]]], timeout: float, *, limit: int = MAX_REPLY_BYTES
    ) -> None:
        _configure_ssl(target)
        self._target, self._timeout, self._limit = target, timeout, limit
        self._stream: dbstream.Stream | None = _open_stream(target, timeout)
        self._deadline = time.monotonic() + timeout
        self._ids = list(range(1, len(calls) + 1))
        try:
            out = "".join(json.dumps({"method": m, "params": p, "id": i}) for i, (m, p) in zip(self._ids, calls))
            _send_all(target, self._stream, out.encode(), self._deadline)
        except BaseException:
            self.close()
            raise

    def replies(self) -> list[dict[str, Any]]:
        """The replies in the order of the calls (once: the stream is closed after)."""
        if self._stream is None:
            raise RuntimeError("the replies of an exchange are read once")
        try:
            got = _receive(self._target, self._stream, set(self._ids), self._deadline, self._timeout, self._limit)
        finally:
            self.close()
        return [got[i] for i in self._ids]

    def close(self) -> None:
        """Give up on the replies (a caller that failed in between): the stream is closed."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _open_stream(target: DbTarget, timeout: float) -> dbstream.Stream:
    """A stream to the first of the target's servers that answers, each tried in order within ``timeout``.

    A clustered database's remotes (``tcp:a:6640,tcp:b:6640``) are tried as
    the IDL tries them, in the order given; a dead one costs its connect
    attempt, not the whole call.  None answering: every one's reason.
    """
    reasons = []
    for remote in target.remotes:
        err, stream = dbstream.open_stream(remote, timeout)
        if stream is not None:
            return stream
        reason = os.strerror(err) if err > 0 else "connection failed"
        reasons.append(reason if len(target.remotes) == 1 else f"{remote}: {reason}")
    raise _unreachable(target, "; ".join(reasons))


def lock_held(target: DbTarget, name: str, timeout: float) -> bool | None:
    """Whether another client holds the OVSDB lock ``name`` (None: the server's answer says neither).

    Asked on a short-lived connection of its own: ``lock`` then ``unlock``,
    pipelined, so a free lock is held for the time between two requests and
    a held one is not waited for (closing the stream would release either).
    """
    replies = exchange(target, [("lock", [name]), ("unlock", [name])], timeout)
    return lock_reply_held(replies[0])


def lock_reply_held(reply: Any) -> bool | None:
    """A ``lock`` request's reply: ``{"locked": true}`` -- it was free (we got it) -- is False, i.e. not
    held by anyone else; ``{"locked": false}`` -- someone has it -- is True; anything else is None."""
    if not isinstance(reply, dict) or reply.get("error") is not None:
        return None
    result = reply.get("result")
    locked = result.get("locked") if isinstance(result, dict) else None
    return None if not isinstance(locked, bool) else not locked


def _send_all(target: DbTarget, stream: dbstream.Stream, data: bytes, deadline: float) -> None:
    while data:
        stream.run()
        sent = stream.send(data)
        if sent > 0:
            data = data[sent:]
            continue
        if sent < 0 and -sent != errno.EAGAIN:
            raise _unreachable(target, os.strerror(-sent))
        _wait(target, stream, deadline, "send", 0)


def _receive(
    target: DbTarget,
    stream: dbstream.Stream,
    pending: set[int],
    deadline: float,
    timeout: float,
    limit: int = MAX_REPLY_BYTES,
) -> dict[int, Any]:
    """Read until every id in ``pending`` has its reply (concatenated JSON objects, no delimiter).

    The server is not trusted to be well-behaved: the deadline holds while
    data keeps arriving (a server trickling bytes is cut off on time), no
    message may grow past ``limit`` bytes, the bytes are decoded once as they
    arrive (invalid UTF-8 becomes U+FFFD) and a lone surrogate that a
    ``\\udXXX`` escape smuggles in becomes U+FFFD too, so every string read
    here can be encoded again (a metric label, a JSON line, a terminal).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []  # decoded text not parsed yet
    size = 0  # its length in bytes as received
    replies: dict[int, Any] = {}
    while pending:
        if time.monotonic() >= deadline:
            raise _unreachable(target, f"no answer within {timeout:g} s")
        stream.run()
        err, chunk = stream.recv(1 << 20)
        if err == 0 and chunk:
            size += len(chunk)
            if size > limit:
                raise OvsdbError(
                    f"{target.describe()}: a reply grew past {limit >> 20} MiB without ending; not reading more",
                    hint="a database that large is not one hvnet reads; check that the target is an ovsdb-server",
                )
            parts.append(decoder.decode(chunk))
            continue  # drain what is there before trying to parse
        if err not in (0, errno.EAGAIN):
            raise _unreachable(target, os.strerror(err))
        closed = err == 0
        # A reply can only end where the data ends with '}': only then is a parse tried
        # (a failed one costs a pass over the text, a few per reply at most).
        if parts and parts[-1].rstrip().endswith("}"):
            text = _parse_replies("".join(parts), pending, replies)
            parts = [text] if text else []
            size = len(text)  # characters: a close enough count of its bytes
        if pending and closed:
            raise _unreachable(target, "connection closed before the reply")
        if pending:
            _wait(target, stream, deadline, f"no answer within {timeout:g} s", 1)
    return replies


def _parse_replies(text: str, pending: set[int], replies: dict[int, Any]) -> str:
    """Take the complete messages at the start of ``text`` (those answering ``pending`` into ``replies``);
    what is left: the start of a message still arriving."""
    decoder = json.JSONDecoder()
    text = text.lstrip()
    while text:
        try:
            msg, used = decoder.raw_decode(text)
        except ValueError:
            break
        if _may_hold_surrogates(text, used):
            msg = without_lone_surrogates(msg)
        if isinstance(msg, dict) and msg.get("id") in pending:
            pending.discard(msg["id"])
            replies[msg["id"]] = msg
        text = text[used:].lstrip()
    return text


# An escape that can decode to a surrogate (a valid pair decodes to one character; a lone one stays).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _may_hold_surrogates(text: str, end: int) -> bool:
    """Whether ``text[:end]`` has an escape that can decode to a surrogate (two plain searches first: a
    megabyte of reply without ``\\ud`` is passed over at memory speed)."""
    if text.find("\\ud", 0, end) < 0 and text.find("\\uD", 0, end) < 0:
        return False
    return _SURROGATE_ESCAPE.search(text, 0, end) is not None


def without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with every lone surrogate in its strings, keys included, replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    return value


def _wait(target: DbTarget, stream: dbstream.Stream, deadline: float, what: str, direction: int) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _unreachable(target, what)
    stream.wait(bool(direction), int(remaining * 1000) + 1)


def column(row: Any, name: str) -> Any:
    """Read ``row.name`` for a read-only pass over the replica, fast.

    ``Row.__getattr__`` converts set and map columns to Python, back to a
    Datum (to merge pending mutations) and to Python again; for a row with no
    pending changes one conversion is enough.  On a 1000-port bridge this
    halves the inventory refresh.  Rows being modified take the normal path.

    A column the server left at its default (an empty set, an unset optional)
    is not in the row's data: python-ovs makes its default Datum when the
    column is looked up (``ColumnDefaultDict.__missing__``), which ``[]``
    does and ``.get()`` does not.  Most of a VIF's columns are such defaults.
    A column the replica does not have (not registered) raises KeyError there
    and takes the normal path, which says so (AttributeError).
    """
    data = row._data
    if data is not None and not row._changes and not row._mutations:
        try:
            datum = data[name]
        except KeyError:
            return getattr(row, name)
        return datum.to_python(row._uuid_to_row)
    return getattr(row, name)


def opt(value: list[Any]) -> Any:
    """An optional column's value: it reads as ``[]`` or ``[x]``, this gives None or ``x``."""
    return value[0] if value else None


@dataclass
class TxnContext:
    """What a transaction's ``build`` function gets: the replica and the txn."""

    conn: Connection
    txn: ovs.db.idl.Transaction

    @property
    def tables(self) -> dict[str, Any]:
        return self.conn.idl.tables

    def rows(self, table: str) -> Iterable[Any]:
        return self.conn.idl.tables[table].rows.values()

    def insert(self, table: str) -> Any:
        return self.txn.insert(self.conn.idl.tables[table])

    def root(self) -> Any:
        """The single Open_vSwitch row."""
        return self.conn.root()


@dataclass
class TxnResult:
    """Outcome of :meth:`Connection.transact`."""

    status: str  # "success" or "unchanged"
    value: Any
    attempts: int
    next_cfg: int | None = None
    vswitchd_lag: str | None = None  # committed, but ovs-vswitchd has not caught up (see Connection.vswitchd_lag)
    unsure: list[int] = field(default_factory=list)  # earlier attempts that may have been committed anyway


class Connection:
    """A long-lived IDL connection to one OVSDB server.

    Use :meth:`open` to connect and wait for the initial snapshot.  Reads go
    through :attr:`idl` ``.tables`` (under :attr:`lock` if a background loop
    is running); writes go through :meth:`transact`.
    """

    def __init__(self, target: DbTarget, columns: Columns, schema_json: dict[str, Any]) -> None:
        self.target = target
        self.lock = threading.RLock()
        self._listeners: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._connected_seqno = -1
        self._synced = threading.Event()  # the initial snapshot is in the replica
        self.reconnects = 0
        self.schema_json = schema_json  # one-shot reads on the same server reuse it
        import ovs.db.idl

        helper = ovs.db.idl.SchemaHelper(schema_json=schema_json)
        self.schema_tables: dict[str, set[str]] = {name: set(t["columns"]) for name, t in schema_json["tables"].items()}
        self.registered: dict[str, set[str]] = {}
        for table, cols in columns.items():
            if table not in self.schema_tables:
                continue
            present = [c for c in cols if c in self.schema_tables[table]]
            helper.register_columns(table, present)
            self.registered[table] = set(present)
        self.idl = ovs.db.idl.Idl(target.remote, helper, probe_interval=5000)
        # No public API sets the back-off; the session's Reconnect FSM has one.
        self.idl._session.reconnect.set_backoff(_MIN_BACKOFF_MS, _MAX_BACKOFF_MS)

    # -- opening ----------------------------------------------------------

    @classmethod
    def open(cls, target: DbTarget, columns: Columns, timeout: float = 5.0, *, sync: bool = True) -> Connection:
        """Connect to ``target`` and wait for the initial database snapshot.

        With ``sync=False`` only the schema is fetched (so an unreachable
        server is still reported here); the replica is built when :meth:`start`
        runs the loop or :meth:`wait_synced` is called.  The console paints its
        first table from a one-shot read meanwhile: on a 1000-VIF host, turning
        the initial snapshot into the IDL's Datums is the largest part of its
        start.
        """
        start = time.monotonic()
        schema = fetch_schema(target, timeout)
        conn = cls(target, columns, schema)
        if sync:
            conn._wait_synced(start + timeout)
        if c_json_parser_in_use():
            log.debug("connected to %s; JSON parser: C (ovs._json)", target.describe())
        else:
            log.warning(
                "the OVS Python library is using its pure-Python JSON parser (slow on large hosts); "
                "install the OS package (python3-openvswitch) that has the C extension"
            )
        return conn

    @property
    def synced(self) -> bool:
        """Whether the replica holds the database (False until the initial snapshot arrives)."""
        return self._synced.is_set()

    @property
    def started(self) -> bool:
        """Whether the background loop runs (see :meth:`start`)."""
        return self._thread is not None

    def wait_synced(self, timeout: float) -> None:
        """Return once the replica holds the database; raise if it does not within ``timeout``."""
        if self._synced.is_set():
            return
        if self._thread is None:
            self._wait_synced(time.monotonic() + timeout)
        elif not self._synced.wait(timeout):
            raise _unreachable(self.target, "no database snapshot received")

    def _wait_synced(self, deadline: float) -> None:
        with self.lock:
            while True:
                self.idl.run()
                if self.idl.has_ever_connected():
                    self._connected_seqno = self.idl._session.get_seqno()
                    self._synced.set()
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _unreachable(self.target, "no database snapshot received")
                self._block(remaining)

    def _block(self, seconds: float, txn: ovs.db.idl.Transaction | None = None) -> None:
        import ovs.poller

        poller = ovs.poller.Poller()
        self.idl.wait(poller)
        if txn is not None:
            txn.wait(poller)
        poller.timer_wait(max(1, int(seconds * 1000)))
        poller.block()

    def close(self) -> None:
        """Stop the background loop (if any) and close the session."""
        self.stop()
        with self.lock:
            self.idl.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state --------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self.idl._session.is_connected()

    def set_lock(self, name: str | None) -> None:
        """Ask the server for the named OVSDB lock (None lets it go).

        Granted asynchronously: until :attr:`has_lock`, every transaction
        ends NOT_LOCKED (the IDL refuses to send it), so a client that wants
        a lock writes only while it holds it.  The IDL asks again on every
        reconnect; acquiring the lock counts as a change (listeners run).
        """
        with self.lock:
            self.idl.set_lock(name)

    @property
    def has_lock(self) -> bool:
        """Whether the server says this connection holds the lock asked for with :meth:`set_lock`."""
        return bool(self.idl.has_lock)

    @property
    def lock_contended(self) -> bool:
        """Whether the server said another client holds the lock asked for."""
        return bool(self.idl.is_lock_contended)

    @property
    def change_seqno(self) -> int:
        return self.idl.change_seqno

    def has_column(self, table: str, column: str) -> bool:
        """Whether the server's schema has ``table.column`` and hvnet reads it."""
        return column in self.registered.get(table, ())

    def root(self) -> Any:
        """The single ``Open_vSwitch`` row (raises if the database is empty)."""
        rows = list(self.idl.tables["Open_vSwitch"].rows.values())
        if not rows:
            raise OvsdbError(
                "the Open_vSwitch table is empty", hint="initialise the database: ovs-vsctl --no-wait init"
            )
        return rows[0]

    def run_once(self, wait: float = 0.0) -> bool:
        """Process pending messages; optionally block up to ``wait`` seconds first.

        Returns True if the replica changed.  Used by foreground callers that
        want fresh state (e.g. after someone else's change).
        """
        with self.lock:
            before = self.idl.change_seqno
            self.idl.run()
            if wait > 0 and self.idl.change_seqno == before:
                self._block(wait)
                self.idl.run()
            self._note_reconnect()
            return self.idl.change_seqno != before

    def _note_reconnect(self) -> None:
        seqno = self.idl._session.get_seqno()
        if self.is_connected and seqno != self._connected_seqno:
            if self._connected_seqno >= 0:
                self.reconnects += 1
                log.info("reconnected to %s", self.target.where or self.target.remote)
            self._connected_seqno = seqno

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Run the IDL until ``predicate()`` holds (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                self.idl.run()
                self._note_reconnect()
                if predicate():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._block(min(remaining, 0.5))

    # -- transactions ---------------------------------------------------------

    def transact(
        self,
        build: Callable[[TxnContext], T],
        *,
        comment: str | None = None,
        wait_for_vswitchd: bool = False,
        timeout: float = 10.0,
    ) -> TxnResult:
        """Run ``build`` inside one transaction and commit it.

        ``build`` is re-run against fresh state after TRY_AGAIN (a verify
        failure from a concurrent change, or a lost connection), so it must be
        a pure function of the replica.  Raising inside ``build`` aborts.
        """
        import ovs.db.idl

        deadline = time.monotonic() + timeout
        attempts = 0
        unsure: list[int] = []  # attempts whose commit may have gone through (see TxnResult.unsure)
        while True:
            attempts += 1
            with self.lock:
                self.idl.run()
                self._note_reconnect()
                seqno_before = self.idl.change_seqno
                session_before = self.idl._session.get_seqno()
                txn = ovs.db.idl.Transaction(self.idl)
                if comment:
                    txn.add_comment(comment)
                try:
                    value = build(TxnContext(self, txn))
                    if wait_for_vswitchd:
                        self.root().increment("next_cfg")
                except BaseException:
                    txn.abort()
                    raise
                status = self._commit(txn, deadline)
                if status == ovs.db.idl.Transaction.ABORTED or (
                    status == ovs.db.idl.Transaction.TRY_AGAIN
                    and (not self.is_connected or self.idl._session.get_seqno() != session_before)
                ):
                    # Abandoned at the deadline, or the connection dropped while it was out: the
                    # server may have committed it.  A verify() conflict (same session) never is.
                    unsure.append(attempts)
                    status = ovs.db.idl.Transaction.TRY_AGAIN
            if status == ovs.db.idl.Transaction.SUCCESS or status == ovs.db.idl.Transaction.UNCHANGED:
                next_cfg = None
                lag = None
                if wait_for_vswitchd and status == ovs.db.idl.Transaction.SUCCESS:
                    # Committed: from here on nothing raises, so the caller still records and audits it.
                    next_cfg = txn.get_increment_new_value()
                    lag = self.vswitchd_lag(next_cfg, max(1.0, deadline - time.monotonic()))
                return TxnResult(
                    status="success" if status == ovs.db.idl.Transaction.SUCCESS else "unchanged",
                    value=value,
                    attempts=attempts,
                    next_cfg=next_cfg,
                    vswitchd_lag=lag,
                    unsure=unsure,
                )
            if status == ovs.db.idl.Transaction.TRY_AGAIN:
                # A verify() failed because of a concurrent change, or the
                # connection dropped: wait for new state, then re-plan.
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    error = ConflictError(
                        f"transaction on {self.target.where or self.target.remote} did not go through within "
                        f"{timeout:g} s ({attempts} attempts, "
                        f"{'connected' if self.is_connected else 'not connected'})",
                        hint="another client kept changing the same rows, or OVSDB is unreachable; retry",
                    )
                    error.unsure = unsure
                    raise error
                self.wait_for(lambda s=seqno_before: self.idl.change_seqno != s, min(0.5, remaining))
                continue
            if status == ovs.db.idl.Transaction.ERROR:
                raise OvsdbError(f"OVSDB rejected the transaction: {txn.get_error()}")
            if status == ovs.db.idl.Transaction.NOT_LOCKED:
                raise OvsdbError(f"not sent: another client holds the OVSDB lock {self.idl.lock_name!r}")
            raise OvsdbError(f"transaction ended with status {ovs.db.idl.Transaction.status_to_string(status)}")

    def _commit(self, txn: ovs.db.idl.Transaction, deadline: float) -> int:
        """Drive ``txn`` to a final status without ever blocking past ``deadline``."""
        import ovs.db.idl

        while True:
            status = txn.commit()
            if status != ovs.db.idl.Transaction.INCOMPLETE:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                txn.abort()
                return ovs.db.idl.Transaction.ABORTED
            self.idl.run()
            self._block(min(remaining, 0.5), txn)

    def wait_for_vswitchd(self, next_cfg: int, timeout: float) -> None:
        """Wait until ovs-vswitchd reports ``cur_cfg >= next_cfg``."""
        lag = self.vswitchd_lag(next_cfg, timeout)
        if lag is not None:
            raise HvnetError(lag, hint="is ovs-vswitchd running and connected to this database?")

    def vswitchd_lag(self, next_cfg: int, timeout: float) -> str | None:
        """None once ovs-vswitchd reports ``cur_cfg >= next_cfg``; else what it has not done in ``timeout``."""
        try:
            if self.wait_for(lambda: (self.root().cur_cfg or 0) >= next_cfg, timeout):
                return None
            now = self.root().cur_cfg
        except OvsdbError:
            now = "unknown"
        return (
            f"ovs-vswitchd has not applied configuration {next_cfg} within {timeout:.0f} s (cur_cfg is {now}): "
            "the change is in the database, whether it is in effect is unknown"
        )

    # -- background loop (TUI, agent) ----------------------------------------

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (from the loop thread) after every replica change."""
        self._listeners.append(callback)

    def start(self) -> None:
        """Run the IDL in a background thread, notifying listeners on change.

        Changes are pushed by the server (monitor updates); nothing polls the
        database.  The thread wakes on socket activity or every 0.5 s.
        """
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="hvnet-ovsdb", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._thread = None

    def _loop(self) -> None:
        import ovs.poller

        while not self._stop.is_set():
            with self.lock:
                before = self.idl.change_seqno
                self.idl.run()
                self._note_reconnect()
                if not self._synced.is_set() and self.idl.has_ever_connected():
                    self._synced.set()
                changed = self.idl.change_seqno != before
                poller = ovs.poller.Poller()
                self.idl.wait(poller)
                poller.timer_wait(500)
            if changed:
                for callback in list(self._listeners):
                    try:
                        callback()
                    except Exception:  # a listener bug must not kill the loop
                        log.exception("OVSDB change listener failed")
            poller.block()
