"""The S3 client's answers: times parsed as botocore parses them, at a fraction of its CPU.

Oracle: botocore's own timestamp parser (``botocore.utils.parse_timestamp``), and the object's
time as S3 gives it twice, in a listing's body (ISO 8601) and in a HEAD's header (RFC 1123).
"""
from __future__ import annotations

import time

import pytest
from botocore.utils import parse_timestamp as botocore_parse

from multiwriter import s3

FORMS = [
    "2026-11-30T14:07:39.000Z", "2026-11-30T14:07:39Z", "2026-11-30T14:07:39.123456Z", "1999-01-01T00:00:00.999Z",
    "Mon, 30 Nov 2026 14:07:39 GMT", "Sun, 01 Jan 2040 23:59:59 GMT",
    "1700000000", 1700000000, 1700000000.5, "2026-11-30T14:07:39+01:00", "2026-11-30 14:07:39",
]


@pytest.mark.parametrize("value", FORMS, ids=[repr(v) for v in FORMS])
def test_times_parse_as_botocore_parses_them(value):
    got, want = s3.parse_timestamp(value), botocore_parse(value)
    assert got == want and got.utcoffset() == want.utcoffset()


@pytest.mark.parametrize("value", ["garbage", "2026-13-45T99:99:99.000Z", "Mon, 99 Foo 2026 14:07:39 GMT"])
def test_a_time_botocore_refuses_is_refused(value):
    with pytest.raises(ValueError):
        botocore_parse(value)
    with pytest.raises(ValueError):
        s3.parse_timestamp(value)


def test_a_listing_and_a_head_agree_on_an_objects_time(s3_server):
    bucket = s3_server().removeprefix("s3://")
    client = s3.data_client()
    before = time.time()
    client.put_object(Bucket=bucket, Key="d/a", Body=b"x")
    listed = client.list_objects_v2(Bucket=bucket, Prefix="d/")["Contents"][0]["LastModified"]
    head = client.head_object(Bucket=bucket, Key="d/a")["LastModified"]
    assert listed.utcoffset().total_seconds() == 0 and int(listed.timestamp()) == int(head.timestamp())
    assert before - 2 <= listed.timestamp() <= time.time() + 2
