"""``ZooKeeperLock``: one lock per table at ``<base_path>/<lock key>``, shared with Hudi's JVM writers.

The lock znode and its contenders follow Hudi's ZooKeeper lock provider (Curator's
``InterProcessMutex``), so a Python writer and a Hudi Spark/Streamer job on one table exclude
each other:

* The lock znode is ``<base_path>/<lock_key>``; the lock key defaults to the table name (as
  ``hoodie.write.lock.zookeeper.lock_key`` defaults to ``hoodie.table.name``).
* Contenders are ephemeral sequential children whose names end in ``-lock-<seq>``: ours are
  ``<uuid>-lock-<seq>``, Curator's ``_c_<uuid>-lock-<seq>``. Both sides order every child by the
  sequence number after the last ``lock-``, so they queue in one order.
* Nothing else lives under the lock znode (Curator would misorder a child without ``lock-<seq>``
  and could wait on it forever): writer registrations are under ``<base_path>/_multiwriter/``.

Design points, each fixing a way a ZooKeeper lock commonly goes wrong:

* One ``KazooClient`` per process and (connect string, credentials, session timeout), shared by
  every table and commit: a session per commit would make every commit pay a connection setup
  and would flood the ensemble with sessions.
* A lock is only as good as the session that owns its ephemeral node. A connection-state
  listener marks every held lock lost on SUSPENDED or LOST, and :meth:`check` (the commit fence)
  also confirms the session id and the node before every commit. A lock that was suspended stays
  lost even if the session survives: we cannot prove nobody else held it meanwhile. (Hudi's own
  ZooKeeper lock provider does not fence like this.)
* Bounded waits: an unreachable ensemble is a ``LockError`` within ``connection_timeout_s``; the
  acquire timeout bounds the whole acquire, not each wait inside kazoo's recipe.
* Releases never leave a node behind while our session lives: a release that cannot reach the
  server is retried by a background thread when the connection comes back; so is the contender
  node of an acquire that failed (kazoo's own clean-up gives up on a dropped connection).
* Quick resumption after a leader election: the reconnect loop and the recipe's retries back off
  to at most half a second (kazoo's recipe default backs off up to a minute), and every acquire
  splits its wait into causes (reconnection, a stale own node, another holder, retry backoff),
  logged when slow and counted in ``multiwriter_lock_wait_cause_seconds_total``.
* Optional digest auth: our nodes get an ACL so other clients cannot delete them.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError, KazooException, LockTimeout, NoAuthError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Permissions, make_digest_acl, make_digest_acl_credential

from ..threads import Deadlines, free_in_child, renew_in_child
from ..errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from .base import (
    LOCK_KEY_PROPERTY,
    WAIT_CALLS,
    WAIT_HOLDER,
    WAIT_RECONNECT,
    WAIT_RETRY,
    WAIT_STALE_OWN_NODE,
    HolderInfo,
    LockProvider,
    TableLock,
    WaitClock,
    describe_holder,
    resolve_timeout,
    table_name_of,
    validate_table_id,
    validate_writer_id,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)

BASE_PATH_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+\Z")
#: the name part of a contender node, before its sequence number (Curator's ``lock-`` after a dash)
CONTENDER_NAME = "-lock-"
CONTENDER_RE = re.compile(r"lock-(\d{10})$")
#: our own bookkeeping beside the lock znodes (writer registrations), never under one
OWN_NODE = "_multiwriter"
#: where releases of multiwriter before the shared layout kept a table's lock (``<base>/<table id>/lock``)
LEGACY_LOCK_CHILD = "lock"
#: kazoo's own wait can overrun the timeout (it restarts on every predecessor change); a timer
#: cancels the recipe at the deadline, but never sooner than this, so tiny timeouts still try once.
MIN_CANCEL_S = 0.25
#: every acquire's overall timeout, on one thread (:class:`~multiwriter.threads.Deadlines`)
_DEADLINES = Deadlines("mw-lock-deadline")
#: kazoo retries its reconnect (one cycle over every server) with backoff; capped so that a client
#: finds a newly elected quorum within about half a second instead of after a multi-second sleep
RECONNECT_MAX_DELAY_S = 0.5
#: the lock recipe retries a call that failed on a dropped connection; kazoo's default backs off up
#: to 60 s, so a few drops during an election could park a writer long after the quorum is back.
#: A call made while disconnected waits for the reconnect anyway, so a short cap costs no load.
RECIPE_MAX_DELAY_S = 0.5
#: an acquire that took longer than this logs what it waited for
SLOW_ACQUIRE_S = 1.0


def retry_policy(max_tries: int, *, deadline: float | None = None) -> KazooRetry:
    """Bounded retries with exponential backoff and jitter for one ZooKeeper command.

    A session expiry is not retried: the ephemeral nodes it owned are gone, so the caller must
    learn about it.
    """
    return KazooRetry(max_tries=max_tries, delay=0.1, backoff=2, max_jitter=0.4, max_delay=5.0,
                      ignore_expire=False, deadline=deadline)


def recipe_retry(sleep_func: Callable[[float], None] = time.sleep) -> KazooRetry:
    """The lock recipe's retry of calls that failed on a dropped connection: unbounded tries (the
    acquire's deadline bounds them), backoff capped at ``RECIPE_MAX_DELAY_S``."""
    return KazooRetry(max_tries=None, delay=0.05, backoff=2, max_jitter=0.4, max_delay=RECIPE_MAX_DELAY_S,
                      sleep_func=sleep_func)


class _FolderGone(Exception):
    """An acquire that took the lock's folder as there found it gone: the next one creates it."""


class SharedLock(Lock):
    """kazoo's Lock recipe with contender names Curator understands: ``<uuid>-lock-<seq>``.

    kazoo finds contenders by the name part before the sequence number; with ``-lock-`` that
    part also matches Curator's ``_c_<uuid>-lock-<seq>``, so each side waits for the other's
    lower sequence numbers (this relies on kazoo's ``_NODE_NAME``/``_EXCLUDE_NAMES``, 2.9 to 2.11).

    It also keeps a :class:`WaitClock` of what it waits for, and deletes a predecessor that is
    a node this process abandoned (``is_own_stale``/``drop_own_stale``) instead of waiting for it.
    """

    _NODE_NAME = CONTENDER_NAME
    _EXCLUDE_NAMES = [CONTENDER_NAME]

    def __init__(self, client: KazooClient, path: str, identifier: str | None = None, *, table_id: str = "?",
                 clock: WaitClock | None = None, is_own_stale: Callable[[str], bool] | None = None,
                 drop_own_stale: Callable[[], None] | None = None, path_ready: bool = False) -> None:
        super().__init__(client, path, identifier=identifier)
        #: the lock's folder was there earlier in this session: kazoo's ensure_path (one round
        #: trip) is skipped, and a create that finds the folder gone says so (:class:`_FolderGone`)
        self.path_ready = self.assured_path = path_ready
        self.table_id = table_id
        self.clock = clock if clock is not None else WaitClock()
        self._is_own_stale = is_own_stale or (lambda _node: False)
        self._drop_own_stale = drop_own_stale or (lambda: None)
        self._retry = recipe_retry(self._backoff_sleep)
        self.waiting_on: str | None = None

    def _backoff_sleep(self, seconds: float) -> None:
        self.clock.switch(WAIT_RETRY)
        log.debug("lock of %s: a ZooKeeper call failed on a dropped connection; retrying in %.2fs", self.table_id,
                  seconds)
        time.sleep(seconds)
        self.clock.switch(WAIT_CALLS if self.client.connected else WAIT_RECONNECT)

    def _watch_session(self, state: str) -> bool:
        # kazoo's connection thread, while we wait for a predecessor
        if state != KazooState.CONNECTED and self.clock.switch(WAIT_RECONNECT):
            log.info("lock of %s: waiting for reconnection to ZooKeeper (connection %s)", self.table_id, state)
        return bool(super()._watch_session(state))

    def _get_predecessor(self, node: str) -> str | None:
        pred = super()._get_predecessor(node)
        if pred is None:
            self.clock.switch(WAIT_CALLS)
            return None
        full = f"{self.path}/{pred}"
        if self._is_own_stale(full):
            self.clock.switch(WAIT_STALE_OWN_NODE)
            log.warning("lock of %s: waiting for stale own node %s to go (left by an earlier acquire or release that "
                        "lost its connection); deleting it", self.table_id, full)
            self._drop_own_stale()
        else:
            self.clock.switch(WAIT_HOLDER)
            if full != self.waiting_on:
                log.debug("lock of %s: waiting behind %s", self.table_id, full)
        self.waiting_on = full
        return pred


def contender_order(children: list[str]) -> list[str]:
    """The contenders among ``children``, lowest sequence number (the holder) first."""
    seqs = [(m.group(1), c) for c in children if (m := CONTENDER_RE.search(c)) is not None]
    return [c for _, c in sorted(seqs)]


def describe_contender(name: str, data: bytes | None) -> str:
    """Our holder record, or a JVM (Curator) contender named by its node and data."""
    if data is not None and data.startswith(b"{"):
        return describe_holder(data)
    text = (data or b"").decode(errors="replace")[:100]
    jvm = "a Hudi JVM writer (Curator InterProcessMutex)" if name.startswith("_c_") else "an unknown contender"
    return f"{jvm}, node {name}, data {text!r}"


# -- one shared client per process ----------------------------------------------------------------
class _SharedClient:
    """A started KazooClient and everything that must hear about its session."""

    def __init__(self, client: KazooClient, connect: str, call_timeout_s: float) -> None:
        self.client = client
        self.connect = connect
        self.call_timeout_s = call_timeout_s  # bound for background calls (kazoo queues them while disconnected)
        self.pid = os.getpid()
        self.refs = 0
        self._watchers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._orphans: set[str] = set()
        self._mu = threading.Lock()
        self._reconnect_mu = threading.Lock()
        renew_in_child(self)  # kept in the process-wide _clients
        client.add_listener(self._on_state)

    def usable(self) -> bool:
        """False once stopped for good, or in a forked child (kazoo's threads do not survive fork)."""
        stopped = getattr(self.client, "_stopped", None)
        return self.pid == os.getpid() and not (stopped is not None and stopped.is_set())

    def watch(self, obj: Any) -> None:
        with self._mu:
            self._watchers.add(obj)

    def unwatch(self, obj: Any) -> None:
        with self._mu:
            self._watchers.discard(obj)

    def add_orphan(self, node: str) -> None:
        """A lock node we released but could not delete; deleted once the server answers again.
        A name ending in ``-lock-`` stands for every node with that prefix (a create whose reply
        was lost)."""
        with self._mu:
            self._orphans.add(node)
        if self.client.connected:
            self._spawn_followup()

    def has_orphans(self) -> bool:
        return bool(self._orphans)

    def is_orphan(self, node: str) -> bool:
        """Whether ``node`` is one we abandoned (so nobody in this process waits on it as holder)."""
        with self._mu:
            orphans = list(self._orphans)
        return any(node == o or (o.endswith(CONTENDER_NAME) and node.startswith(o)) for o in orphans)

    def flush_orphans(self) -> None:
        """Delete orphaned lock nodes now, if there are any (no round trip otherwise)."""
        if self._orphans:
            self.after_reconnect()

    def _delete_orphan(self, node: str) -> None:
        """Delete one orphan (every node of a prefix orphan); raises what the server raised."""
        targets = [node]
        if node.endswith(CONTENDER_NAME):
            parent, prefix = node.rsplit("/", 1)
            try:
                children = self.client.get_children_async(parent).get(timeout=self.call_timeout_s)
            except NoNodeError:
                children = []
            targets = [f"{parent}/{c}" for c in children if c.startswith(prefix)]
        for t in targets:
            try:
                self.client.delete_async(t).get(timeout=self.call_timeout_s)
            except NoNodeError:
                pass

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: only set flags and start threads here.
        with self._mu:
            watchers = list(self._watchers)
        for w in watchers:
            w._on_session_event(state)
        if state == KazooState.CONNECTED:
            self._spawn_followup()

    def _spawn_followup(self) -> None:
        threading.Thread(target=self.after_reconnect, daemon=True, name="mw-zk-reconnect").start()

    def after_reconnect(self) -> None:
        """Delete orphaned lock nodes and restore writer registrations (serialised; idempotent)."""
        with self._reconnect_mu:
            with self._mu:
                orphans, watchers = list(self._orphans), list(self._watchers)
            for node in orphans:
                try:
                    self._delete_orphan(node)
                except (KazooTimeoutError, KazooException) as e:
                    log.info("lock node %s not deleted yet (%s); will retry on the next reconnect", node, e)
                    continue
                with self._mu:
                    self._orphans.discard(node)
                log.info("deleted lock node %s left by a release that could not reach ZooKeeper", node)
            for w in watchers:
                hook = getattr(w, "_after_reconnect", None)
                if hook is not None:
                    hook()

    def stop(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except (KazooException, OSError) as e:  # shutting down: nothing left to protect
            log.debug("stopping the ZooKeeper client of %s: %s", self.connect, e)


_clients: dict[tuple[Any, ...], _SharedClient] = {}
_clients_mu = free_in_child(threading.Lock())
_start_mus: dict[tuple[Any, ...], threading.Lock] = {}
os.register_at_fork(after_in_child=_start_mus.clear)  # a connect under way at a fork: not the child's


def _start_lock(key: tuple[Any, ...]) -> threading.Lock:
    """One lock per key, so a slow connect to one ensemble does not block the others."""
    with _clients_mu:
        return _start_mus.setdefault(key, threading.Lock())


def _stop_all_at_exit() -> None:
    """Close our sessions on a clean exit, so our ephemeral nodes vanish now rather than after
    the session timeout (a crashed process still blocks others for up to one session timeout)."""
    with _clients_mu:
        shared = list(_clients.values())
        _clients.clear()
    for s in shared:
        if s.pid == os.getpid():
            s.stop()


atexit.register(_stop_all_at_exit)


# -- the provider ------------------------------------------------------------------------------------
class ZooKeeperLock(LockProvider):
    """Table locks in ZooKeeper; safe across processes and machines.

    >>> lock = ZooKeeperLock(connect="127.0.0.1:2181", base_path="/multiwriter")  # doctest: +SKIP
    >>> with lock.for_table("trips-1a2b", storage) as held:                       # doctest: +SKIP
    ...     held.check()
    """

    def __init__(
        self,
        connect: str,
        base_path: str = "/multiwriter",
        *,
        lock_key: str | None = None,
        session_timeout_s: float = 10.0,
        acquire_timeout_s: float = 30.0,
        connection_timeout_s: float = 10.0,
        auth: tuple[str, str] | None = None,
        max_retries: int = 5,
    ) -> None:
        if not isinstance(connect, str) or not connect.strip():
            raise ConfigError("ZooKeeperLock needs connect='host:port[,host:port...]', e.g. '127.0.0.1:2181'")
        if not isinstance(base_path, str) or not BASE_PATH_RE.match(base_path) or _has_dot_part(base_path):
            raise ConfigError(
                f"base_path {base_path!r} must be an absolute ZooKeeper path such as '/multiwriter' "
                "(parts of [A-Za-z0-9_.-], no trailing '/', no '.' or '..')"
            )
        if base_path.split("/")[1] == "zookeeper":
            raise ConfigError(f"base_path {base_path!r} is inside /zookeeper, which ZooKeeper reserves")
        if session_timeout_s <= 0 or connection_timeout_s <= 0 or acquire_timeout_s < 0 or max_retries < 1:
            raise ConfigError(
                "ZooKeeperLock needs session_timeout_s > 0, connection_timeout_s > 0, acquire_timeout_s >= 0 "
                f"and max_retries >= 1; got {session_timeout_s}, {connection_timeout_s}, {acquire_timeout_s}, "
                f"{max_retries}"
            )
        if auth is not None and not (
            isinstance(auth, tuple) and len(auth) == 2 and all(isinstance(a, str) and a for a in auth)
            and ":" not in auth[0]
        ):
            raise ConfigError("auth must be (user, password): two non-empty strings, the user without ':'")
        if lock_key is not None:
            validate_table_id(lock_key)
            if lock_key == OWN_NODE:
                raise ConfigError(f"lock_key {lock_key!r} is reserved for multiwriter's writer registrations")
        self.connect = connect.strip()
        self.base_path = base_path
        self.lock_key = lock_key
        self.session_timeout_s = float(session_timeout_s)
        self.acquire_timeout_s = float(acquire_timeout_s)
        self.connection_timeout_s = float(connection_timeout_s)
        self.auth = auth
        self.max_retries = int(max_retries)
        self._shared: _SharedClient | None = None
        self._mu = threading.Lock()

    kind = "zookeeper"

    def table_properties(self) -> dict[str, str]:
        props = {**super().table_properties(), "multiwriter.lock.zookeeper.base_path": self.base_path}
        if self.lock_key is not None:
            props[LOCK_KEY_PROPERTY] = self.lock_key
        return props

    def __repr__(self) -> str:
        auth = f"({self.auth[0]!r}, '***')" if self.auth else "None"
        return (f"ZooKeeperLock(connect={self.connect!r}, base_path={self.base_path!r}, lock_key={self.lock_key!r}, "
                f"session_timeout_s={self.session_timeout_s}, auth={auth})")

    def __getstate__(self) -> dict[str, Any]:
        """Picklable as configuration; the connection is per process and reopened lazily."""
        state = dict(self.__dict__)
        state["_shared"], state["_mu"] = None, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._mu = threading.Lock()

    # -- paths --------------------------------------------------------------------------------
    def lock_key_of(self, table_id: str) -> str:
        """The lock key of a table: the configured one, else the table's name (Hudi's default)."""
        return self.lock_key or table_name_of(table_id)

    def lock_path(self, table_id: str) -> str:
        """The lock znode of one table, ``<base_path>/<lock key>``; only contenders are its children."""
        return f"{self.base_path}/{self.lock_key_of(table_id)}"

    def legacy_lock_path(self, table_id: str) -> str:
        """Where multiwriter kept the table's lock before sharing Hudi's layout."""
        return f"{self.base_path}/{validate_table_id(table_id)}/{LEGACY_LOCK_CHILD}"

    def writers_path(self, table_id: str) -> str:
        """Writer registrations of one table: beside the lock znodes, never under one."""
        return f"{self.base_path}/{OWN_NODE}/{validate_table_id(table_id)}/writers"

    # -- connection ----------------------------------------------------------------------------
    def _key(self) -> tuple[Any, ...]:
        return (self.connect, self.auth, self.session_timeout_s)

    def _shared_client(self) -> _SharedClient:
        """This provider's share of the process-wide client; started on first use."""
        with self._mu:
            if self._shared is not None and self._shared.usable():
                return self._shared
            key = self._key()
            with _start_lock(key):
                with _clients_mu:
                    shared = _clients.get(key)
                if shared is None or not shared.usable():
                    shared = _SharedClient(self._start_client(), self.connect, self.connection_timeout_s)
                with _clients_mu:
                    _clients[key] = shared
                    shared.refs += 1
            self._shared = shared
            return shared

    def client(self) -> KazooClient:
        """The shared, started KazooClient of this process (one per connect string and credentials)."""
        return self._shared_client().client

    def retry(self, deadline: float | None = None) -> KazooRetry:
        """A fresh copy of the command retry policy (bounded tries, backoff, jitter)."""
        return retry_policy(self.max_retries, deadline=deadline)

    def _start_client(self) -> KazooClient:
        kw: dict[str, Any] = {}
        if self.auth is not None:
            user, password = self.auth
            kw["auth_data"] = [("digest", f"{user}:{password}")]
            kw["default_acl"] = [make_digest_acl(user, password, all=True)]
        # Reconnect forever: a GC pause or a server restart must not kill a long-running
        # writer's client for good. Commands retry a bounded number of times.
        reconnect = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.4, max_delay=RECONNECT_MAX_DELAY_S)
        try:
            client = KazooClient(hosts=self.connect, timeout=self.session_timeout_s, connection_retry=reconnect,
                                 command_retry=self.retry(), **kw)
        except (ValueError, KazooException) as e:
            raise ConfigError(f"ZooKeeper connect string {self.connect!r} is not usable: {e}") from e
        try:
            client.start(timeout=self.connection_timeout_s)
        except (KazooTimeoutError, KazooException, OSError) as e:
            client.stop()
            client.close()
            raise LockError(
                f"ZooKeeper at {self.connect} is unreachable: no session within {self.connection_timeout_s:.1f}s "
                f"({type(e).__name__}: {e}); check the connect string and that the ensemble is up "
                "(`multiwriter zookeeper --port N` runs a local one)"
            ) from e
        log.info("connected to ZooKeeper at %s (session 0x%x)", self.connect, client.client_id[0])
        return client

    def await_connection(self, client: KazooClient) -> None:
        """Wait up to ``connection_timeout_s`` for a (re)connected client, else ``LockError``."""
        deadline = time.monotonic() + self.connection_timeout_s
        while not client.connected:
            if time.monotonic() >= deadline:
                raise LockError(
                    f"not connected to ZooKeeper at {self.connect} for {self.connection_timeout_s:.1f}s (the ensemble "
                    "is down or unreachable; the client keeps reconnecting): retry later"
                )
            time.sleep(0.05)

    # -- locks ---------------------------------------------------------------------------------
    def for_table(self, table_id: str, storage: Storage | None = None) -> TableLock:
        return ZooKeeperTableLock(self, validate_table_id(table_id))

    # -- writer registration ------------------------------------------------------------------------
    def register_writer(self, table_id: str, writer_id: str) -> WriterRegistration:
        """Claim ``writer_id`` on the table with an ephemeral node, so that a second live query
        with the same writer id fails fast (``ConfigError``) instead of corrupting the other's
        exactly-once checkpoint. ``handle.close()`` gives it up; a crash gives it up after the
        session timeout."""
        validate_table_id(table_id)
        validate_writer_id(writer_id)
        shared = self._shared_client()
        self.await_connection(shared.client)
        reg = WriterRegistration(self, shared, table_id, writer_id)
        reg.create()
        shared.watch(reg)
        return reg

    def live_writers(self, table_id: str) -> list[str]:
        """Writer ids registered live on the table now (their ephemeral nodes), sorted; what
        ``multiwriter status --zk`` shows. Waits for a connection like every other call."""
        shared = self._shared_client()
        self.await_connection(shared.client)
        try:
            return sorted(shared.client.retry(shared.client.get_children, self.writers_path(table_id)))
        except NoNodeError:
            return []

    def close(self) -> None:
        """Give up this provider's share of the client; the last share closes the session."""
        with self._mu:
            shared, self._shared = self._shared, None
        if shared is None:
            return
        with _clients_mu:
            shared.refs -= 1
            last = shared.refs <= 0
            if last and _clients.get(self._key()) is shared:
                del _clients[self._key()]
        if last:
            shared.stop()


def auth_hint(e: Exception, auth: tuple[str, str] | None) -> str:
    """What to do about a NoAuthError: the nodes carry a digest ACL of other (or no) credentials."""
    if not isinstance(e, NoAuthError):
        return ""
    given = f"the credentials of user {auth[0]!r} are not" if auth else "no credentials were given, and they are"
    return (f" ({given} allowed on these nodes, which carry a digest ACL: pass the writers' credentials, "
            "auth=(user, password) in Python, --zk-auth USER:PASSWORD or $MULTIWRITER_ZK_AUTH on the command line, "
            "multiwriter.lock.zookeeper.auth in options)")


def _has_dot_part(path: str) -> bool:
    return any(part in (".", "..") for part in path.split("/"))


# -- one table's lock ----------------------------------------------------------------------------
class ZooKeeperTableLock(TableLock):
    """kazoo's Lock recipe on one table, fenced by the session it was acquired in."""

    def __init__(self, provider: ZooKeeperLock, table_id: str) -> None:
        self.provider = provider
        self.table_id = table_id
        self.path = provider.lock_path(table_id)
        self._shared: _SharedClient | None = None
        self._node: str | None = None  # full path of our lock node while held
        self._session: int | None = None
        self._lost: str | None = None
        self._acl_checked = False
        self._legacy_checked = False
        #: the session in which this lock's folder was last seen (an acquire in it made a node there)
        self._folder_session: int | None = None

    @property
    def node_path(self) -> str | None:
        """Our lock node while we hold the lock (for operators and tests)."""
        return self._node

    # -- acquire -----------------------------------------------------------------------------
    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None, *,
                fenced: bool = False) -> None:
        if self._node is not None:
            raise LockError(f"the ZooKeeper lock of table {self.table_id} is already held by this writer; release it first")
        timeout = resolve_timeout(timeout_s, self.provider.acquire_timeout_s)
        shared = self.provider._shared_client()
        client = shared.client
        clock = WaitClock()
        started = time.monotonic()
        acquired = False
        try:
            if not client.connected:
                clock.switch(WAIT_RECONNECT)
                log.info("lock of %s: waiting for reconnection to ZooKeeper at %s", self.table_id, self.provider.connect)
            self.provider.await_connection(client)
            clock.switch(WAIT_CALLS)
            if shared.has_orphans():  # our own stale nodes must not block us
                clock.switch(WAIT_STALE_OWN_NODE)
                shared.flush_orphans()
                clock.switch(WAIT_CALLS)
            self._warn_if_unprotected(client)
            data = {**(holder.to_dict() if holder else {}), "table_id": self.table_id, "acquired_at": time.time()}
            self._refuse_legacy_contenders(client)
            identifier = json.dumps(data, sort_keys=True)
            recipe = self._recipe(shared, identifier, clock)
            try:
                ok = self._run_recipe(shared, recipe, timeout)
            except _FolderGone:  # removed since our last acquire: this one creates it again
                recipe = self._recipe(shared, identifier, clock)
                ok = self._run_recipe(shared, recipe, max(MIN_CANCEL_S, timeout - (time.monotonic() - started)))
            if not ok:
                if not client.connected:
                    raise LockError(
                        f"lost the connection to ZooKeeper at {self.provider.connect} while waiting for the lock of "
                        f"table {self.table_id} ({clock.describe()}); retry when the ensemble is reachable"
                    )
                raise LockAcquireTimeout(
                    f"ZooKeeper lock of table {self.table_id} ({self.path} at {self.provider.connect}) not acquired "
                    f"within {timeout:.1f}s ({clock.describe()}); held by {self._current_holder(recipe)}; another "
                    "writer is committing, or its process hangs while holding the lock (it is released when its "
                    "session expires): retry, or raise the lock timeout"
                )
            self._take(shared, f"{self.path}/{recipe.node}", confirm=not fenced)
            acquired = True
        finally:
            self._report_wait(clock, holder, time.monotonic() - started, acquired)

    def _report_wait(self, clock: WaitClock, holder: HolderInfo | None, total_s: float, acquired: bool) -> None:
        """Log a slow acquire with what it waited for, and count the wait by cause."""
        waited = clock.stop()
        outcome = "acquired" if acquired else "not acquired"
        if total_s >= SLOW_ACQUIRE_S:
            unusual = any(s >= 0.05 for c, s in waited.items() if c not in (WAIT_HOLDER, WAIT_CALLS))
            log.log(logging.WARNING if unusual else logging.INFO, "lock of %s %s after %.1fs: %s", self.table_id,
                    outcome, total_s, clock.describe())
        else:
            log.debug("lock of %s %s after %.3fs (%s)", self.table_id, outcome, total_s, self._node)
        try:
            from ..metrics import default

            default().lock_wait_causes(table_name_of(self.table_id), holder.writer_id if holder else "", waited)
        except Exception as e:  # noqa: BLE001 -- metrics must never break locking
            log.debug("could not record lock wait metrics: %s", e)

    def _recipe(self, shared: _SharedClient, identifier: str, clock: WaitClock) -> SharedLock:
        """kazoo's recipe for one acquire; the folder is taken as there when an acquire of this
        session made a node in it (each acquire's ensure_path cost a round trip)."""
        client_id = shared.client.client_id
        ready = client_id is not None and client_id[0] == self._folder_session
        return SharedLock(shared.client, self.path, identifier=identifier, table_id=self.table_id, clock=clock,
                          is_own_stale=shared.is_orphan, drop_own_stale=shared.flush_orphans, path_ready=ready)

    def _run_recipe(self, shared: _SharedClient, recipe: SharedLock, timeout: float) -> bool:
        """kazoo's acquire, bounded by ``timeout`` overall; False on timeout. A failed acquire's
        contender node is handed to the orphan clean-up, in case kazoo's own could not delete it."""
        cancel_timer = _DEADLINES.call_after(max(timeout, MIN_CANCEL_S), recipe.cancel)
        ok = gone = False
        try:
            ok = bool(recipe.acquire(blocking=True, timeout=timeout))
            return ok
        except (LockTimeout, CancelledError):
            return False
        except NoNodeError as e:
            # the create found no folder (ZooKeeper deletes an empty container node, as Curator
            # makes them): no node of ours exists, nothing to abandon
            gone = recipe.path_ready and recipe.node is None
            if not gone:
                raise self._zk_error(e) from e
            self._folder_session = None
            raise _FolderGone(self.path) from e
        except KazooException as e:
            raise self._zk_error(e) from e
        finally:
            cancel_timer()
            if not ok and not gone:
                self._abandon(shared, recipe)

    def _zk_error(self, e: KazooException) -> LockError:
        return LockError(
            f"ZooKeeper error while acquiring the lock of table {self.table_id} at {self.provider.connect}: "
            f"{type(e).__name__}: {e}{auth_hint(e, self.provider.auth)}"
        )

    def _abandon(self, shared: _SharedClient, recipe: SharedLock) -> None:
        """Make sure a failed acquire leaves no contender node: one left there while our session
        lives would queue every writer (this one included) behind it."""
        if recipe.node:
            shared.add_orphan(f"{self.path}/{recipe.node}")
        elif recipe.create_tried:
            shared.add_orphan(recipe.create_path)  # a create whose reply may have been lost: by prefix

    def _take(self, shared: _SharedClient, node: str, confirm: bool = True) -> None:
        """Become the holder, then confirm: a session event between kazoo's last look and our
        listener registration would otherwise go unnoticed. A fenced acquire skips the
        confirmation: its caller's :meth:`check` probes the same before anything it does
        under the lock can matter."""
        client_id = shared.client.client_id
        self._shared, self._node, self._lost = shared, node, None
        self._session = self._folder_session = client_id[0] if client_id else None
        shared.watch(self)
        if not confirm:
            return
        why = self._probe()
        if why is not None:
            self.release()
            raise LockError(f"the lock of table {self.table_id} was lost right after it was acquired ({why}); retry")

    def _current_holder(self, recipe: Lock) -> str:
        """The holder named in the lowest contender node (best effort: only for messages)."""
        client = recipe.client
        try:
            for name in contender_order(client.get_children(self.path)):
                try:
                    return describe_contender(name, client.get(f"{self.path}/{name}")[0])
                except NoNodeError:
                    continue
        except KazooException as e:
            return f"an unknown holder (could not read it: {e})"
        return describe_holder(None)

    def _refuse_legacy_contenders(self, client: KazooClient) -> None:
        """Once per table lock: a writer of an older multiwriter locks ``<base>/<table id>/lock``
        and would not exclude us; refuse to run beside it rather than commit unexcluded."""
        if self._legacy_checked:
            return
        old = self.provider.legacy_lock_path(self.table_id)
        try:
            live = client.get_children(old)
        except NoNodeError:
            live = []
        except KazooException as e:
            raise LockError(f"could not check the old lock location {old}: {type(e).__name__}: {e}") from e
        if live:
            raise LockError(
                f"table {self.table_id} is also being locked at {old} (contenders {sorted(live)[:3]}) by a multiwriter "
                f"release older than the shared lock layout ({self.path}); those writers would not exclude this one: "
                "stop them and upgrade every writer and cleaner of the table together"
            )
        self._legacy_checked = True

    def _warn_if_unprotected(self, client: KazooClient) -> None:
        """With auth, our ACL only protects nodes we create: warn if the lock directory was created
        earlier by someone else with an ACL that lets others delete our lock nodes."""
        if self.provider.auth is None or self._acl_checked:
            return
        self._acl_checked = True
        user, password = self.provider.auth
        ours = make_digest_acl_credential(user, password)
        try:
            client.ensure_path(self.path)
            acls: list[ACL] = client.get_acls(self.path)[0]
        except KazooException as e:
            log.warning("could not read the ACL of %s: %s", self.path, e)
            return
        others = [a for a in acls if a.perms & Permissions.DELETE and not (a.id.scheme == "digest" and a.id.id == ours)]
        if others:
            log.warning(
                "%s was created without our ACL; %s may delete lock nodes there. Recreate it with auth, "
                "or restrict it (zkCli setAcl)", self.path, [f"{a.id.scheme}:{a.id.id}" for a in others],
            )

    # -- fence -----------------------------------------------------------------------------------
    def _on_session_event(self, state: str) -> None:
        if self._node is None:
            return
        if state == KazooState.SUSPENDED:
            self._mark_lost("the connection to ZooKeeper was suspended; the session may have expired meanwhile")
        elif state == KazooState.LOST:
            self._mark_lost("the ZooKeeper session expired or was closed, and its lock node with it")

    def _mark_lost(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
            log.warning("ZooKeeper lock of table %s lost: %s", self.table_id, why)

    def _probe_timeout(self) -> float:
        return min(self.provider.connection_timeout_s, self.provider.session_timeout_s)

    def _probe(self) -> str | None:
        """Why the lock is no longer ours, or None. One round trip (sync + exists, pipelined)."""
        assert self._shared is not None and self._node is not None
        client = self._shared.client
        client_id = client.client_id
        if client_id is None:
            return "not connected to ZooKeeper"
        if client_id[0] != self._session:
            return "the ZooKeeper session changed (the one holding the lock expired)"
        try:
            client.sync_async(self._node)
            stat = client.exists_async(self._node).get(timeout=self._probe_timeout())
        except KazooTimeoutError:
            return f"ZooKeeper did not answer within {self._probe_timeout():.1f}s"
        except KazooException as e:
            return f"ZooKeeper error ({type(e).__name__}: {e})"
        if stat is None:
            return f"our lock node {self._node} is gone (deleted, or expired with the session)"
        if stat.ephemeralOwner != self._session:
            return f"our lock node {self._node} belongs to another session"
        return None

    def is_held(self) -> bool:
        if self._node is None or self._lost is not None or self._shared is None:
            return False
        client_id = self._shared.client.client_id
        return client_id is not None and client_id[0] == self._session

    def check(self) -> None:
        if self._node is None:
            raise LockLostError(f"the ZooKeeper lock of table {self.table_id} is not held; not committing")
        if self._lost is None:
            why = self._probe()
            if why is not None:
                self._mark_lost(why)
        if self._lost is not None:
            raise LockLostError(
                f"the ZooKeeper lock of table {self.table_id} may have passed to another writer ({self._lost}); "
                "this commit is refused and will be retried"
            )

    # -- release ---------------------------------------------------------------------------------
    def release(self) -> None:
        node, shared = self._node, self._shared
        self._node = None
        if node is None or shared is None:
            return
        shared.unwatch(self)
        client = shared.client
        if not client.connected:
            log.warning("releasing the lock of %s while disconnected; %s is deleted on reconnect", self.table_id, node)
            shared.add_orphan(node)
            return
        try:
            client.delete_async(node).get(timeout=self._probe_timeout())
        except NoNodeError:
            pass  # expired with an old session
        except (KazooTimeoutError, KazooException) as e:
            log.warning("releasing the lock of %s failed (%s); %s is deleted on reconnect", self.table_id, e, node)
            shared.add_orphan(node)


# -- writer registration -----------------------------------------------------------------------------
class WriterRegistration:
    """The ephemeral node ``<base>/<table>/writers/<writer id>`` of one live writer.

    Restored after a session expiry (when the id is still free), so a writer that survived a
    long pause keeps its claim.
    """

    def __init__(self, provider: ZooKeeperLock, shared: _SharedClient, table_id: str, writer_id: str) -> None:
        self.provider, self._shared = provider, shared
        self.table_id, self.writer_id = table_id, writer_id
        self.path = f"{provider.writers_path(table_id)}/{writer_id}"
        self.token = uuid.uuid4().hex
        self._data = json.dumps({**HolderInfo.current(writer_id).to_dict(), "token": self.token,
                                 "registered_at": time.time()}, sort_keys=True).encode()
        self._closed = False

    def create(self) -> None:
        """Create our node; ``ConfigError`` naming the holder if another writer has the id."""
        client = self._shared.client
        for _ in range(3):  # the other holder may vanish between our create and our read
            try:
                self.provider.retry()(client.create, self.path, self._data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            except KazooException as e:
                raise LockError(
                    f"could not register writer {self.writer_id!r} in ZooKeeper at {self.provider.connect}: "
                    f"{type(e).__name__}: {e}{auth_hint(e, self.provider.auth)}"
                ) from e
            try:
                got = self._get()
            except (KazooTimeoutError, KazooException) as e:
                raise LockError(f"could not read the registration {self.path}: {e}") from e
            if got is None:
                continue
            if self.token.encode() in got[0]:
                return  # our own create, retried after a lost reply
            raise ConfigError(
                f"writer id {self.writer_id!r} is already in use on table {self.table_id} by "
                f"{describe_holder(got[0])}; two queries must not share a writer id: stop the other query or give "
                "this one its own writer_id"
            )
        raise LockError(f"could not register writer {self.writer_id!r}: {self.path} kept appearing and vanishing")

    def _get(self) -> tuple[bytes, Any] | None:
        """Our node's data and stat, None if absent; bounded wait (kazoo queues calls while
        disconnected, and a plain ``get`` would then block until the server is back)."""
        try:
            raw, stat = self._shared.client.get_async(self.path).get(timeout=self.provider.connection_timeout_s)
        except NoNodeError:
            return None
        return raw, stat

    def is_registered(self) -> bool:
        """Whether our node is there now (one round trip)."""
        try:
            got = self._get()
        except (KazooTimeoutError, KazooException):
            return False
        return got is not None and self.token.encode() in got[0]

    def _on_session_event(self, state: str) -> None:
        if state == KazooState.LOST and not self._closed:
            log.warning("the ZooKeeper session of writer %r expired; re-registering on reconnect", self.writer_id)

    def _after_reconnect(self) -> None:
        if self._closed or self.is_registered():
            return
        try:
            self.create()
            log.info("writer %r re-registered on table %s", self.writer_id, self.table_id)
        except ConfigError as e:
            log.error("writer %r could not re-register after its session expired: %s", self.writer_id, e)
        except LockError as e:
            log.warning("re-registering writer %r failed (%s); retrying on the next reconnect", self.writer_id, e)

    def close(self) -> None:
        """Delete our node (only if it is still ours); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._shared.unwatch(self)
        try:
            got = self._get()
            if got is not None and self.token.encode() in got[0]:
                wait = self.provider.connection_timeout_s
                self._shared.client.delete_async(self.path, version=got[1].version).get(timeout=wait)
        except (KazooTimeoutError, KazooException) as e:  # gone, or disconnected: it goes with the session
            log.debug("unregistering writer %r: %s", self.writer_id, e)


__all__ = ["WriterRegistration", "ZooKeeperLock", "ZooKeeperTableLock", "retry_policy"]
