"""``gs://`` tables: the storage lock and the commit decision on Google Cloud Storage.

The store is ``gcp-storage-emulator`` behind :class:`testbed.gcs_emulator.Front`, which decides
``ifGenerationMatch`` atomically as Cloud Storage does (the emulator ignores it). Objects are
read back with plain JSON API requests (:meth:`GcsEmulator.objects`), not with the code under
test; hudi-rs reads a downloaded copy of the table. Credentials are fetched from token servers
on 127.0.0.1 that check what Google's would: the service account's signature, the refresh token.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest

import multiwriter as mw
from multiwriter import gcs
from multiwriter.errors import ConfigError, LockAcquireTimeout, LockLostError
from multiwriter.lock import HolderInfo, StorageLock
from multiwriter.lock.storage import LOCK_FILE, GcsLockStore, read_lock
from multiwriter.storage import Storage
from tests.lock.test_storage_lock import two_writers_with_the_storage_lock
from tests.oracle import hudi_read, rows

ROOT = Path(__file__).resolve().parents[1]
HOLDER = HolderInfo("w1", "host-a", 4242, "20240101000000000")


def lock_object(gcs_server, bucket: str) -> dict | None:
    raw = gcs_server.objects(bucket).get("tbl/" + LOCK_FILE)
    return None if raw is None else json.loads(raw)


def raw_upload(endpoint: str, bucket: str, name: str, data: bytes, generation: str) -> int:
    """An upload with a generation precondition, by hand: the HTTP status."""
    conn = http.client.HTTPConnection(endpoint.split("://")[1], timeout=10)
    conn.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}&ifGenerationMatch={generation}",
                 body=data, headers={"Content-Type": "application/octet-stream"})
    status = conn.getresponse().status
    conn.close()
    return status


def test_the_store_refuses_a_second_create_as_cloud_storage_does(gcs_server):
    """The test store itself: a create loses to an existing object, a replace to a newer one."""
    bucket = gcs_server.bucket()[5:]
    assert raw_upload(gcs_server.endpoint, bucket, "a", b"1", "0") == 200
    assert raw_upload(gcs_server.endpoint, bucket, "a", b"2", "0") == 412
    assert raw_upload(gcs_server.endpoint, bucket, "a", b"3", "12345") == 412
    assert gcs_server.objects(bucket) == {"a": b"1"}


def test_a_commit_decision_on_gcs_has_one_winner(gcs_server):
    """Eight threads race to create each of 20 names: exactly one wins each, and the object holds
    the winner's bytes (the commit decision rests on this)."""
    uri = gcs_server.bucket() + "/tbl"
    storage = Storage(uri)
    wins: Counter[str] = Counter()
    won_with: dict[str, bytes] = {}
    mu = threading.Lock()
    start = threading.Barrier(8)

    def racer(n: int) -> None:
        start.wait()
        for k in range(20):
            data = f"writer {n} decision {k}".encode()
            if storage.create_exclusive(f".hoodie/decisions/{k:03d}", data):
                with mu:
                    wins[str(k)] += 1
                    won_with[f"tbl/.hoodie/decisions/{k:03d}"] = data

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert wins == {str(k): 1 for k in range(20)}
    stored = {k: v for k, v in gcs_server.objects(uri[5:].split("/")[0]).items() if "/decisions/" in k}
    assert stored == won_with
    with pytest.raises(mw.errors.FileExists):
        storage.put_if_absent(".hoodie/decisions/000", b"again")


def test_acquire_exclude_release_in_hudis_format_on_gcs(gcs_server):
    uri = gcs_server.bucket() + "/tbl"
    bucket = uri[5:].split("/")[0]
    storage = Storage(uri)
    p = StorageLock(validity_s=10, renew_interval_s=1)
    a, b = p.for_table("tbl", storage), p.for_table("tbl", storage)
    assert isinstance(a.store, GcsLockStore)
    before = time.time() * 1000
    a.acquire(timeout_s=5, holder=HOLDER)
    body = lock_object(gcs_server, bucket)
    assert {"expired", "validUntil", "owner"} <= set(body) and body["expired"] is False
    assert body["holder"]["writer_id"] == "w1" and before + 9_000 <= body["validUntil"]
    with pytest.raises(LockAcquireTimeout, match="'w1'"):
        b.acquire(timeout_s=0.3)
    a.check()
    a.release()
    assert lock_object(gcs_server, bucket)["expired"] is True
    with pytest.raises(LockLostError):
        a.check()
    b.acquire(timeout_s=2)
    assert lock_object(gcs_server, bucket)["owner"] not in (body["owner"], None)
    assert read_lock(storage).owner == lock_object(gcs_server, bucket)["owner"]
    b.release()


def test_a_lock_held_by_a_hudi_writer_on_gcs_is_honoured(gcs_server):
    """Hudi's JVM writer writes its three fields alone; a live one excludes us, a released one not."""
    uri = gcs_server.bucket() + "/tbl"
    bucket = uri[5:].split("/")[0]
    live = {"expired": False, "validUntil": int(time.time() * 1000 + 60_000), "owner": "jvm-owner-1"}
    assert raw_upload(gcs_server.endpoint, bucket, "tbl%2F" + LOCK_FILE.replace("/", "%2F"),
                      json.dumps(live).encode(), "0") == 200
    lock = StorageLock(validity_s=10, renew_interval_s=1).for_table("tbl", Storage(uri))
    with pytest.raises(LockAcquireTimeout, match="a Hudi writer \\(owner jvm-owner-1\\)"):
        lock.acquire(timeout_s=0.3)


CHILD = r'''
import json, sys, time
from multiwriter.lock import HolderInfo, StorageLock
from multiwriter.storage import Storage

a = json.loads(sys.argv[1])
lock = StorageLock(validity_s=10, renew_interval_s=1, poll_s=0.01).for_table("t", Storage(a["uri"]))
spans = []
for _ in range(a["n"]):
    lock.acquire(timeout_s=120, holder=HolderInfo.current(a["writer"]))
    t0 = time.monotonic()
    time.sleep(0.002)
    lock.check()
    t1 = time.monotonic()
    lock.release()
    spans.append([t0, t1])
print(json.dumps(spans), flush=True)
'''


def test_processes_never_hold_the_gcs_lock_together(gcs_server):
    """Three processes take the lock 15 times each; their hold intervals, on the machine's shared
    monotonic clock, never overlap."""
    uri = gcs_server.bucket() + "/tbl"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps({"uri": uri, "writer": f"w{n}", "n": 15})],
                              cwd=str(ROOT), env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in range(3)]
    spans = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            spans += [tuple(s) for s in json.loads(out.strip().splitlines()[-1])]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert len(spans) == 45
    spans.sort()
    for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, f"two holders at once: [{s0}, {e0}] and [{s1}, {e1}]"
    assert gcs_server.stats()["refused"] > 0  # the writers did race: the store turned some away


def test_two_writers_on_gcs_with_the_storage_lock(gcs_server, tmp_path):
    """Two writers commit concurrently through mw.write on a version-9 gs:// table (the metadata
    table on, which hudi-rs lists files from) under the storage lock:
    every commit lands, and hudi-rs reads every row from a copy of the bucket, before and after
    a companion-job run under the same lock."""
    uri = gcs_server.bucket() + "/trips"
    want = two_writers_with_the_storage_lock(uri, table_version=9)  # version 8 runs on S3
    assert rows(hudi_read(gcs_server.download(uri, str(tmp_path / "copy"))), ["id", "value"]) == want
    # the companion job on the same lock: old versions cleaned, instants archived, rows kept
    with mw.Cleaner(uri, lock=StorageLock(validity_s=10, renew_interval_s=1), retain_commits=1, archive_keep_min=1,
                    archive_keep_max=2) as c:
        report = c.run_once()
    assert report.errors == [] and report.old_versions_deleted >= 1 and report.archived >= 1
    assert rows(hudi_read(gcs_server.download(uri, str(tmp_path / "after"))), ["id", "value"]) == want


# -- credentials ------------------------------------------------------------------------------------
class _TokenServer:
    """Google's token endpoint and a VM's metadata server, on 127.0.0.1: a token only for a
    correctly signed service-account assertion, the right refresh token, or the metadata header;
    ``seen`` records the grants, ``auth`` the Authorization headers of other requests."""

    def __init__(self, public_key, refresh_token: str = "r-1") -> None:
        self.public_key, self.refresh_token = public_key, refresh_token
        self.seen: list[str] = []
        self.auth: list[str] = []
        #: Authorization headers answered 401
        self.revoked: set[str] = set()
        server = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
                ok = server.grant(form, f"http://127.0.0.1:{self.server.server_address[1]}/token")
                self._answer(200 if ok else 401, {"access_token": f"tok-{len(server.seen)}", "expires_in": 3600}
                             if ok else {"error": "invalid_grant"})

            def do_GET(self) -> None:
                if self.path.startswith("/computeMetadata/"):
                    server.seen.append("metadata")
                    ok = self.headers.get("Metadata-Flavor") == "Google"
                    self._answer(200 if ok else 403, {"access_token": "vm-token", "expires_in": 3600})
                    return
                sent = self.headers.get("Authorization", "")
                server.auth.append(sent)
                self._answer(401 if sent in server.revoked else 404, {"error": {"code": 401 if sent in server.revoked else 404}})

            def _answer(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *a) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def grant(self, form: dict, audience: str) -> bool:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        kind = form.get("grant_type", "")
        self.seen.append(kind)
        if kind == "refresh_token":
            return form.get("refresh_token") == self.refresh_token and form.get("client_secret") == "s"
        if kind != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return False
        head, claims, sig = form["assertion"].split(".")
        pad = lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))  # noqa: E731
        try:
            self.public_key.verify(pad(sig), f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except Exception:  # noqa: BLE001 -- a bad signature is a refused grant
            return False
        c = json.loads(pad(claims))
        return (json.loads(pad(head))["alg"] == "RS256" and c["iss"] == "sa@p.iam.gserviceaccount.com"
                and c["aud"] == audience and c["scope"] == gcs.SCOPE and c["iat"] <= time.time() < c["exp"])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def rsa_key():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return key, pem


@pytest.fixture()
def token_server(rsa_key):
    server = _TokenServer(rsa_key[0].public_key())
    yield server
    server.close()


def test_a_service_account_key_gets_a_token_that_requests_carry(tmp_path, rsa_key, token_server):
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
                                    "private_key": rsa_key[1], "private_key_id": "k1",
                                    "token_uri": f"{token_server.url}/token"}))
    creds = gcs.Credentials({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file), "HOME": str(tmp_path)})
    client = gcs.GcsClient(token_server.url, creds, call_timeout_s=5)
    assert client.get("b", "tbl/.hoodie/.locks/table_lock.json") is None
    assert client.get("b", "tbl/.hoodie/.locks/table_lock.json") is None
    assert token_server.seen == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]  # one token, kept
    assert token_server.auth == ["Bearer tok-1", "Bearer tok-1"]


def test_a_revoked_token_is_replaced_once(tmp_path, rsa_key, token_server):
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
                                    "private_key": rsa_key[1], "token_uri": f"{token_server.url}/token"}))
    client = gcs.GcsClient(token_server.url, gcs.Credentials({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}), 5)
    token_server.revoked.add("Bearer tok-1")
    assert client.get("b", "o") is None
    assert token_server.auth == ["Bearer tok-1", "Bearer tok-2"] and len(token_server.seen) == 2
    token_server.revoked.add("Bearer tok-2")
    token_server.revoked.add("Bearer tok-3")
    with pytest.raises(gcs.GcsError) as e:  # refused again with a new token: said, not retried for ever
        client.get("b", "o")
    assert e.value.status == 401


def test_a_key_signed_by_another_key_is_refused_with_a_clear_error(tmp_path, token_server):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
                                    "private_key": other, "token_uri": f"{token_server.url}/token"}))
    with pytest.raises(ConfigError, match="refused a token \\(HTTP 401\\)"):
        gcs.Credentials({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}).token()


def test_a_users_refresh_token_and_a_vms_metadata_server_give_tokens(tmp_path, token_server):
    adc = tmp_path / "gcloud"
    adc.mkdir()
    (adc / "application_default_credentials.json").write_text(json.dumps({
        "type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r-1",
        "token_uri": f"{token_server.url}/token"}))
    assert gcs.Credentials({"CLOUDSDK_CONFIG": str(adc)}).token() == "tok-1"
    host = token_server.url.split("://")[1]
    assert gcs.Credentials({"GCE_METADATA_HOST": host, "HOME": str(tmp_path)}).token() == "vm-token"
    assert token_server.seen == ["refresh_token", "metadata"]


def test_credentials_are_never_sent_in_clear_text_off_this_machine(tmp_path):
    key_file = tmp_path / "user.json"
    key_file.write_text(json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s",
                                    "refresh_token": "r", "token_uri": "http://oauth.example.com/token"}))
    with pytest.raises(ConfigError, match="not https"):
        gcs.Credentials({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}).token()
    with pytest.raises(ConfigError, match="STORAGE_EMULATOR_HOST"):
        gcs.endpoint({"STORAGE_EMULATOR_HOST": "ftp://x"})
