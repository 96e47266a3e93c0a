"""``ZooKeeperLock``: kazoo's Lock recipe at ``<base_path>/<table id>/lock``.

One ZooKeeper connection per process (per connect string and credentials), reused across
tables and commits. A connection-state listener marks every held lock lost on SUSPENDED or
LOST, so the commit fence (:meth:`check`) refuses to commit after a session hiccup: Hudi's
ZooKeeper lock misses exactly that. Optional digest auth puts an ACL on our nodes so other
clients cannot delete them.
"""
from __future__ import annotations

import json
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from ..errors import ConfigError, LockAcquireTimeout, LockError, LockLostError
from .base import HolderInfo, LockProvider, TableLock, validate_table_id

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import Storage

log = logging.getLogger(__name__)
WRITER_ID_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class _SharedClient:
    """A started KazooClient shared by every ZooKeeperLock of this process with the same key."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self.refs = 0
        self.locks: weakref.WeakSet[_ZkTableLock] = weakref.WeakSet()
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            for lk in list(self.locks):
                lk._mark_lost(state)


def _closed(client: KazooClient) -> bool:
    """True for a client that was stopped for good (it will never reconnect)."""
    stopped = getattr(client, "_stopped", None)
    return bool(stopped is not None and stopped.is_set())


_clients: dict[tuple, _SharedClient] = {}
_clients_mu = threading.Lock()


class ZooKeeperLock(LockProvider):
    """Table locks in ZooKeeper; safe across processes and machines."""

    def __init__(
        self,
        connect: str,
        base_path: str = "/multiwriter",
        *,
        session_timeout_s: float = 10.0,
        acquire_timeout_s: float = 30.0,
        connection_timeout_s: float = 10.0,
        auth: tuple[str, str] | None = None,
        max_retries: int = 5,
    ) -> None:
        if not connect or not isinstance(connect, str):
            raise ConfigError("ZooKeeperLock needs connect='host:port[,host:port]'")
        if not base_path.startswith("/") or base_path.endswith("/") and base_path != "/":
            raise ConfigError(f"base_path {base_path!r} must be absolute and not end with '/'")
        self.connect = connect
        self.base_path = base_path.rstrip("/")
        self.session_timeout_s = session_timeout_s
        self.acquire_timeout_s = acquire_timeout_s
        self.connection_timeout_s = connection_timeout_s
        self.auth = auth
        self.max_retries = max_retries
        self._shared: _SharedClient | None = None
        self._mu = threading.Lock()

    # -- connection --------------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.connect, self.auth, self.session_timeout_s)

    def _share(self) -> _SharedClient:
        with self._mu:
            if self._shared is not None and not _closed(self._shared.client):
                return self._shared
            with _clients_mu:
                shared = _clients.get(self._key())
                if shared is None or _closed(shared.client):
                    shared = _SharedClient(self._start_client())
                    _clients[self._key()] = shared
                shared.refs += 1
            self._shared = shared
            return shared

    def _start_client(self) -> KazooClient:
        kw: dict[str, Any] = {}
        if self.auth:
            user, pw = self.auth
            kw["auth_data"] = [("digest", f"{user}:{pw}")]
            kw["default_acl"] = [make_digest_acl(user, pw, all=True)]
        # Reconnect forever (a long GC pause or a server restart must not kill the client for
        # good); individual commands retry a bounded number of times.
        reconnect = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.4, "max_delay": 2}
        command = {"max_tries": self.max_retries, "delay": 0.1, "backoff": 2, "max_jitter": 0.4, "max_delay": 5}
        client = KazooClient(hosts=self.connect, timeout=self.session_timeout_s, connection_retry=reconnect,
                             command_retry=command, **kw)
        try:
            client.start(timeout=self.connection_timeout_s)
        except (KazooTimeoutError, KazooException) as e:
            client.stop()
            client.close()
            raise LockError(
                f"ZooKeeper at {self.connect} is unreachable ({type(e).__name__}: {e}); "
                "check the connect string and that the ensemble is up"
            ) from e
        return client

    def client(self) -> KazooClient:
        """The shared, started KazooClient of this process."""
        return self._share().client

    def retry(self) -> KazooRetry:
        return KazooRetry(max_tries=self.max_retries, delay=0.1, backoff=2, max_jitter=0.4, max_delay=5,
                          ignore_expire=False)

    # -- locks -------------------------------------------------------------------------------
    def for_table(self, table_id: str, storage: Storage | None = None) -> TableLock:
        validate_table_id(table_id)
        return _ZkTableLock(self, table_id)

    def lock_path(self, table_id: str) -> str:
        return f"{self.base_path}/{table_id}/lock"

    # -- writer registration ---------------------------------------------------------------------
    def register_writer(self, table_id: str, writer_id: str) -> _Registration:
        validate_table_id(table_id)
        if not writer_id or not set(writer_id) <= WRITER_ID_CHARS or len(writer_id) > 128:
            raise ConfigError(f"writer id {writer_id!r} must match [A-Za-z0-9_.-]{{1,128}}")
        import os
        import socket

        client = self.client()
        path = f"{self.base_path}/{table_id}/writers/{writer_id}"
        data = json.dumps({"writer_id": writer_id, "host": socket.gethostname(), "pid": os.getpid()}).encode()
        try:
            self.retry()(client.create, path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                holder = client.get(path)[0].decode()
            except NoNodeError:
                holder = "(just released: retry)"
            raise ConfigError(
                f"writer id {writer_id!r} is already in use on table {table_id} by {holder}; "
                "two queries must not share a writer id: give each query its own"
            ) from None
        except KazooException as e:
            raise LockError(f"could not register writer {writer_id!r} in ZooKeeper at {self.connect}: {e}") from e
        return _Registration(client, path)

    def close(self) -> None:
        with self._mu:
            shared, self._shared = self._shared, None
        if shared is None:
            return
        with _clients_mu:
            shared.refs -= 1
            if shared.refs <= 0 and _clients.get(self._key()) is shared:
                del _clients[self._key()]
                shared.client.stop()
                shared.client.close()


class _Registration:
    def __init__(self, client: KazooClient, path: str) -> None:
        self.client, self.path = client, path

    def close(self) -> None:
        try:
            self.client.delete(self.path)
        except (NoNodeError, KazooException):
            pass  # gone with the session, or already released


class _ZkTableLock(TableLock):
    def __init__(self, provider: ZooKeeperLock, table_id: str) -> None:
        self.provider = provider
        self.table_id = table_id
        self._lock: Any = None
        self._held = False
        self._lost: str | None = None

    def _mark_lost(self, state: str) -> None:
        if self._held:
            self._lost = state
            log.warning("ZooKeeper session %s while holding the lock of %s", state, self.table_id)

    def acquire(self, timeout_s: float | None = None, holder: HolderInfo | None = None) -> None:
        shared = self.provider._share()
        timeout = self.provider.acquire_timeout_s if timeout_s is None else timeout_s
        ident = json.dumps(holder.to_dict() if holder else {})
        self._lock = shared.client.Lock(self.provider.lock_path(self.table_id), identifier=ident)
        try:
            got = self._lock.acquire(blocking=True, timeout=timeout)
        except LockTimeout:
            got = False
        except KazooException as e:
            raise LockError(f"ZooKeeper error while acquiring the lock of {self.table_id}: {e}") from e
        if not got:
            raise LockAcquireTimeout(
                f"table lock {self.table_id} not acquired within {timeout:.1f}s; held by {self._holder()}; "
                "another writer is committing or a holder hangs: retry, or raise lock_timeout_s"
            )
        self._held, self._lost = True, None
        shared.locks.add(self)

    def _holder(self) -> str:
        try:
            contenders = self._lock.contenders()
            return contenders[0] if contenders else "nobody (released meanwhile)"
        except KazooException:
            return "unknown"

    def release(self) -> None:
        if self._lock is None:
            return
        was = self._held
        self._held = False
        if was:
            try:
                self.provider.retry()(self._lock.release)
            except KazooException as e:  # the node dies with the session anyway
                log.warning("releasing the lock of %s failed: %s", self.table_id, e)
        self._lock = None

    def is_held(self) -> bool:
        return self._held and self._lost is None and self.provider.client().connected

    def check(self) -> None:
        if not self._held:
            raise LockLostError(f"the lock of {self.table_id} is not held")
        if self._lost is not None:
            raise LockLostError(
                f"the ZooKeeper session was {self._lost} while holding the lock of {self.table_id}; "
                "another writer may have taken it, so this commit is refused"
            )
        if not self.provider.client().connected:
            raise LockLostError(f"not connected to ZooKeeper while holding the lock of {self.table_id}")

    def close(self) -> None:
        self.release()
