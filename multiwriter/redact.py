"""Credentials never printed: the one function every log line, error, status and metric label
that shows a table location goes through.

A table URI may carry credentials, as pyarrow accepts them: the user-info part
(``s3://ACCESS_KEY:SECRET@bucket/path``) or query parameters (``?secret_key=...``,
``&session_token=...``, a signed URL's ``X-Amz-Signature``). The URI itself is kept intact where
storage is opened; only what is shown is redacted.
"""
from __future__ import annotations

import re

MASK = "***"

#: ``scheme://`` and what follows it up to whitespace or a quote
_URI = re.compile(r"""(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'"<>]+)""")
#: query parameter names whose values are secrets (matched anywhere in the name, any case)
_SECRET_NAME = re.compile(r"secret|token|passw|pwd|credential|signature|^sig$|key|auth", re.IGNORECASE)


def redact(text: object) -> str:
    """``text`` with every URI's user-info and secret query values replaced by ``***``.

    >>> redact("s3://AKIA:abc/def@bucket/t?region=eu&secret_key=x")
    's3://***@bucket/t?region=eu&secret_key=***'
    """
    return _URI.sub(_redact_uri, str(text))


def _redact_uri(m: re.Match[str]) -> str:
    rest = m.group("rest")
    at = rest.find("@")
    if at >= 0:
        before = rest[:at]
        first = before.split("/", 1)[0]
        # user-info: nothing but the authority before the '@' -- or a secret that holds a '/'
        # (AWS secrets may), told by the ':' between user and password in the first segment
        if "/" not in before or ":" in first:
            rest = f"{MASK}@{rest[at + 1:]}"
    path, sep, query = rest.partition("?")
    if sep:
        query, hsep, fragment = query.partition("#")
        query = "&".join(_redact_param(p) for p in query.split("&"))
        rest = f"{path}?{query}{hsep}{fragment}"
    return m.group("scheme") + rest


def _redact_param(param: str) -> str:
    name, sep, value = param.partition("=")
    return f"{name}={MASK}" if sep and value and _SECRET_NAME.search(name) else param


__all__ = ["MASK", "redact"]
