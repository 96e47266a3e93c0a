"""Google Cloud Storage requests that pyarrow's ``GcsFileSystem`` does not make: conditional writes.

Two parts of multiwriter need a write that only one of several writers can win: the storage lock
(:class:`multiwriter.lock.storage.GcsLockStore`, Hudi's ``GCSStorageLockClient`` in
``hudi-gcp``) and the commit decision (:meth:`multiwriter.storage.Storage.create_exclusive`). On
GCS both are one upload through the JSON API with a generation precondition: ``ifGenerationMatch=0``
creates only if no live object has the name, ``ifGenerationMatch=<g>`` replaces only version
``g``; a lost race is HTTP 412. An object's generation is its version, as an ETag on S3.

Where requests go and who they are from, as Google's own client libraries decide it:

* ``STORAGE_EMULATOR_HOST`` (``host:port`` or a URL) sends them to an emulator, unauthenticated;
* otherwise to ``https://storage.googleapis.com`` with an OAuth2 bearer token from the
  application default credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` (a service account key,
  signed into a JWT assertion, or an authorized user's refresh token), then gcloud's
  ``application_default_credentials.json``, then the metadata server of a Google Cloud VM
  (``GCE_METADATA_HOST`` overrides its address). ``GOOGLE_OAUTH_ACCESS_TOKEN`` gives a token
  outright. Tokens are reused until a minute before they expire.

A call is bounded by its client's ``call_timeout_s`` (connect and read each get half), as the S3
client of the lock is (:func:`multiwriter.s3.s3_client`): the lock's own loops try again.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from .errors import ConfigError
from .threads import free_in_child, renew_in_child

#: Google's Cloud Storage endpoint (the JSON API)
API = "https://storage.googleapis.com"
#: the scope a token is asked for: objects are read and written
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
#: where a service account's or a user's token comes from unless their key file says otherwise
TOKEN_URI = "https://oauth2.googleapis.com/token"
#: a token is renewed this long before it expires
TOKEN_MARGIN_S = 60.0


class GcsError(OSError):
    """A Cloud Storage request failed; ``status`` is its HTTP status (0: no answer at all, the
    outcome unknown)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class PreconditionFailed(GcsError):
    """HTTP 412: the generation precondition did not hold (another writer won)."""


def endpoint(env: dict[str, str] | None = None) -> tuple[str, bool]:
    """The JSON API's base URL and whether it is an emulator (``STORAGE_EMULATOR_HOST``), which
    takes no credentials."""
    env = os.environ if env is None else env
    host = env.get("STORAGE_EMULATOR_HOST", "").strip()
    if not host:
        return API, False
    url = host if "://" in host else f"http://{host}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"STORAGE_EMULATOR_HOST={host!r} is no host:port or http(s) URL of a storage emulator")
    return f"{parts.scheme}://{parts.netloc}", True


# -- credentials ---------------------------------------------------------------------------------
@dataclass
class _Token:
    value: str
    expires_at: float  # time.monotonic()


class Credentials:
    """Bearer tokens from the application default credentials (see the module's docstring)."""

    def __init__(self, env: dict[str, str] | None = None, *, timeout_s: float = 10.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout_s = timeout_s
        self._mu = threading.Lock()
        renew_in_child(self)  # shared by the process-wide clients; held while a token is fetched
        self._token: _Token | None = None

    def forget(self, token: str) -> None:
        """``token`` was refused (revoked, or expired early): the next call fetches another."""
        with self._mu:
            if self._token is not None and self._token.value == token:
                self._token = None

    def token(self) -> str:
        with self._mu:
            if self._token is None or time.monotonic() >= self._token.expires_at - TOKEN_MARGIN_S:
                value, lifetime = self._fetch()
                self._token = _Token(value, time.monotonic() + lifetime)
            return self._token.value

    def _fetch(self) -> tuple[str, float]:
        if self.env.get("GOOGLE_OAUTH_ACCESS_TOKEN"):
            return self.env["GOOGLE_OAUTH_ACCESS_TOKEN"], 3600.0
        path = self.env.get("GOOGLE_APPLICATION_CREDENTIALS") or _gcloud_adc(self.env)
        if path:
            return self._from_key_file(path)
        return self._from_metadata_server()

    def _from_key_file(self, path: str) -> tuple[str, float]:
        try:
            with open(path, encoding="utf-8") as f:
                key = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"the Google credentials file {path} cannot be read: {e}") from e
        kind = key.get("type") if isinstance(key, dict) else None
        token_uri = (key.get("token_uri") or TOKEN_URI) if isinstance(key, dict) else TOKEN_URI
        _refuse_plain_http(token_uri, path)
        if kind == "service_account":
            form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                    "assertion": service_account_assertion(key, token_uri, path)}
        elif kind == "authorized_user":
            missing = [k for k in ("client_id", "client_secret", "refresh_token") if not key.get(k)]
            if missing:
                raise ConfigError(f"the Google credentials file {path} lacks {', '.join(missing)}")
            form = {"grant_type": "refresh_token", "client_id": key["client_id"],
                    "client_secret": key["client_secret"], "refresh_token": key["refresh_token"]}
        else:
            raise ConfigError(f"the Google credentials file {path} is of type {kind!r}; multiwriter reads "
                              "'service_account' and 'authorized_user' keys")
        status, body = _request(token_uri, "POST", urlencode(form).encode(),
                                {"Content-Type": "application/x-www-form-urlencoded"}, self.timeout_s)
        return _token_answer(status, body, token_uri)

    def _from_metadata_server(self) -> tuple[str, float]:
        host = self.env.get("GCE_METADATA_HOST") or "metadata.google.internal"
        url = f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
        try:
            status, body = _request(url, "GET", None, {"Metadata-Flavor": "Google"}, self.timeout_s)
        except OSError as e:
            raise ConfigError(
                "no Google credentials: GOOGLE_APPLICATION_CREDENTIALS is unset, gcloud has no application "
                f"default credentials and the metadata server ({host}) did not answer ({e}); set one of them, "
                "or STORAGE_EMULATOR_HOST for an emulator"
            ) from e
        return _token_answer(status, body, url)


def _gcloud_adc(env: dict[str, str]) -> str | None:
    base = env.get("CLOUDSDK_CONFIG") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config", "gcloud")
    path = os.path.join(base, "application_default_credentials.json")
    return path if os.path.isfile(path) else None


def _refuse_plain_http(url: str, source: str) -> None:
    """A signed assertion or a refresh token is sent over TLS, or to this machine only."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return
    raise ConfigError(f"the token URI {url!r} of {source} is not https: credentials are sent only over TLS")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def service_account_assertion(key: dict[str, Any], audience: str, source: str = "the key",
                              now_s: float | None = None) -> str:
    """A service account's signed JWT (RS256, one hour) asking ``audience`` for a token of :data:`SCOPE`."""
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
    except ImportError as e:  # pragma: no cover - cryptography comes with boto3's and moto's installs
        raise ConfigError("a service account key needs the 'cryptography' package: pip install cryptography") from e
    if not key.get("client_email") or not key.get("private_key"):
        raise ConfigError(f"the service account key {source} lacks client_email or private_key")
    now = int(time.time() if now_s is None else now_s)
    header = {"alg": "RS256", "typ": "JWT"}
    if key.get("private_key_id"):
        header["kid"] = key["private_key_id"]
    claims = {"iss": key["client_email"], "scope": SCOPE, "aud": audience, "iat": now, "exp": now + 3600}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}".encode()
    try:
        private = serialization.load_pem_private_key(key["private_key"].encode(), password=None)
        signature = private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"the private key of {source} is no RSA key in PEM: {e}") from e
    return f"{signing_input.decode()}.{_b64(signature)}"


def _token_answer(status: int, body: bytes, url: str) -> tuple[str, float]:
    if status != 200:
        raise ConfigError(f"{url} refused a token (HTTP {status}): {body[:300]!r}")
    try:
        got = json.loads(body)
        return str(got["access_token"]), float(got.get("expires_in", 3600))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{url} answered no access token: {body[:300]!r}") from e


# -- requests --------------------------------------------------------------------------------------
_conns = threading.local()


def _request(url: str, method: str, body: bytes | None, headers: dict[str, str], timeout_s: float,
             ) -> tuple[int, bytes]:
    """One HTTP request (:func:`_exchange`): its status and body."""
    status, data, _ = _exchange(url, method, body, headers, timeout_s)
    return status, data


def _exchange(url: str, method: str, body: bytes | None, headers: dict[str, str], timeout_s: float,
              ) -> tuple[int, bytes, dict[str, str]]:
    """One HTTP request on this thread's kept connection to the URL's host (a TLS handshake per
    lock poll would cost more than the poll): status, body and headers (names in lower case)."""
    parts = urlsplit(url)
    key = (parts.scheme, parts.netloc, timeout_s)
    pool: dict[Any, http.client.HTTPConnection] = _conns.__dict__.setdefault("pool", {})
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    for attempt in (0, 1):  # a kept connection the server closed meanwhile is opened again, once
        conn = pool.get(key)
        fresh = conn is None
        if conn is None:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = pool[key] = cls(parts.hostname or "", parts.port, timeout=timeout_s)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            answer = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                conn.close()
                pool.pop(key, None)
            return resp.status, data, answer
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
            conn.close()
            pool.pop(key, None)
            if fresh or attempt or (body is not None and method != "GET"):
                # a write whose connection broke may have landed: the caller must find out
                raise GcsError(f"{method} {parts.netloc}{parts.path}: {e}") from e
        except OSError as e:
            conn.close()
            pool.pop(key, None)
            raise GcsError(f"{method} {parts.netloc}{parts.path}: {e}") from e
    raise GcsError(f"{method} {parts.netloc}{parts.path}: no answer")  # pragma: no cover - the loop returns or raises


class GcsClient:
    """Reads with their generation and conditional uploads of small objects (the JSON API)."""

    def __init__(self, base_url: str, credentials: Credentials | None, call_timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.timeout_s = max(0.5, call_timeout_s / 2)

    def _object_url(self, bucket: str, name: str, **query: str) -> str:
        q = f"?{urlencode(query)}" if query else ""
        return f"{self.base_url}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}{q}"

    def get(self, bucket: str, name: str) -> tuple[bytes, str] | None:
        """The object's bytes and generation, or None when there is none: one media GET, whose
        ``x-goog-generation`` header names the generation read (Cloud Storage always sends it)."""
        status, data, headers = self._call("GET", self._object_url(bucket, name, alt="media"))
        if status == 404:
            return None
        self._ok(status, data, "reading", bucket, name)
        generation = headers.get("x-goog-generation")
        if not generation:
            raise GcsError(f"reading gs://{bucket}/{name}: the store named no generation (x-goog-generation), "
                           "which a conditional replace needs; is it Cloud Storage's JSON API?", status)
        return data, generation

    def create(self, bucket: str, name: str, data: bytes, if_generation_match: str,
               content_type: str = "application/octet-stream") -> str:
        """Upload ``data`` as ``name`` only if its generation is ``if_generation_match`` ('0': only
        if there is none); the new generation. :class:`PreconditionFailed` when another writer won."""
        query = urlencode({"uploadType": "media", "name": name, "ifGenerationMatch": if_generation_match})
        url = f"{self.base_url}/upload/storage/v1/b/{quote(bucket, safe='')}/o?{query}"
        status, body, _ = self._call("POST", url, data, {"Content-Type": content_type})
        if status == 412:
            raise PreconditionFailed(f"gs://{bucket}/{name}: generation is not {if_generation_match}", 412)
        self._ok(status, body, "writing", bucket, name)
        try:
            return str(json.loads(body)["generation"])
        except (ValueError, KeyError, TypeError) as e:
            raise GcsError(f"writing gs://{bucket}/{name}: the answer names no generation: {body[:200]!r}", status) from e

    def _call(self, method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
              ) -> tuple[int, bytes, dict[str, str]]:
        """One request with the current token; a 401 (a token revoked or expired before its
        time) drops it and tries once more with a new one."""
        answer, token = self._send(method, url, body, headers)
        if answer[0] == 401 and token is not None and self.credentials is not None:
            self.credentials.forget(token)
            answer, _ = self._send(method, url, body, headers)
        return answer

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
              ) -> tuple[tuple[int, bytes, dict[str, str]], str | None]:
        sent = dict(headers or {})
        token = self.credentials.token() if self.credentials is not None else None
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return _exchange(url, method, body, sent, self.timeout_s), token

    @staticmethod
    def _ok(status: int, body: bytes, doing: str, bucket: str, name: str) -> None:
        if not 200 <= status < 300:
            raise GcsError(f"{doing} gs://{bucket}/{name}: HTTP {status}: {body[:200]!r}", status)


_clients: dict[tuple[Any, ...], GcsClient] = {}
_clients_mu = free_in_child(threading.Lock())


def client(call_timeout_s: float) -> GcsClient:
    """This process's client for the current environment and call bound (its credentials'
    tokens are kept across calls)."""
    base, emulator = endpoint()
    env = os.environ
    key = (os.getpid(), base, emulator, env.get("GOOGLE_APPLICATION_CREDENTIALS"), env.get("GOOGLE_OAUTH_ACCESS_TOKEN"),
           call_timeout_s)
    with _clients_mu:
        got = _clients.get(key)
        if got is None:
            got = _clients[key] = GcsClient(base, None if emulator else Credentials(), call_timeout_s)
        return got


def filesystem_options(env: dict[str, str] | None = None) -> dict[str, Any]:
    """``pyarrow.fs.GcsFileSystem`` options of the same environment: an emulator's address,
    anonymous, or Google's default credentials (pyarrow's own chain)."""
    base, emulator = endpoint(env)
    if not emulator:
        return {}
    parts = urlsplit(base)
    return {"anonymous": True, "endpoint_override": parts.netloc, "scheme": parts.scheme}
