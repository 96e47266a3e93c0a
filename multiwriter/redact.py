"""Credentials never printed: the one function every log line, error, status and metric label
that shows a table location goes through.

A table URI may carry credentials, as pyarrow accepts them: the user-info part
(``s3://ACCESS_KEY:SECRET@bucket/path``) or query parameters (``?secret_key=...``,
``&session_token=...``, a signed URL's ``X-Amz-Signature``). The URI itself is kept intact where
storage is opened; only what is shown is redacted.

One rule for every line shown: :class:`RedactFilter` applies :func:`redact_log` (``redact`` plus
ZooKeeper digest credentials as kazoo prints its requests and ACLs) to every log record of the
``multiwriter`` and ``kazoo`` loggers, their exception text included. :func:`install` (run when
``multiwriter`` is imported) puts it into the log record factory, so every logger of those
packages, whenever it is created, hands handlers only redacted records; the error classes of
:mod:`multiwriter.errors` redact their own messages.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any

from .threads import free_in_child

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


#: kazoo's reprs of digest credentials: ``Auth(auth_type=0, scheme='digest', auth='user:password')``,
#: ``('digest', 'user:password')`` in auth data, ``Id(scheme='digest', id='user:hash')`` in ACLs
_ZK_AUTH = re.compile(r"""(?P<head>\bauth=b?|\(\s*b?['"]digest['"],\s*b?|scheme=b?['"]digest['"],\s*id=b?)"""
                      r"""(?P<q>['"])(?P<user>[^:'"]*:)?[^'"]*(?P=q)""")


def redact_log(text: object) -> str:
    """:func:`redact`, and the password of ZooKeeper digest credentials as kazoo shows them
    (the user is kept).

    >>> redact_log("Sending request(xid=None): Auth(auth_type=0, scheme='digest', auth='u:pw')")
    "Sending request(xid=None): Auth(auth_type=0, scheme='digest', auth='u:***')"
    """
    shown = redact(text)
    if "digest" in shown or "auth=" in shown:
        shown = _ZK_AUTH.sub(_redact_zk, shown)
    return shown


def _redact_zk(m: re.Match[str]) -> str:
    return f"{m.group('head')}{m.group('q')}{m.group('user') or ''}{MASK}{m.group('q')}"


#: the loggers whose records are redacted (and their children)
LOGGERS = ("multiwriter", "kazoo")


class RedactFilter(logging.Filter):
    """Rewrites a record's message (and exception text) through :func:`redact_log`; never drops
    a record. Add it to a handler to redact other packages' records too."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a broken format: logging reports it as usual
            return True
        shown = redact_log(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_log(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER = RedactFilter()
_installed = False
_install_mu = free_in_child(threading.Lock())


def install() -> None:
    """Redact every record of the :data:`LOGGERS` from now on (idempotent): the filter goes
    into the log record factory (a filter on a logger would not see its children's records)
    and onto the loggers themselves."""
    global _installed
    with _install_mu:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if record.name.split(".", 1)[0] in LOGGERS:
                _FILTER.filter(record)
            return record

        logging.setLogRecordFactory(factory)
        for name in LOGGERS:
            logging.getLogger(name).addFilter(_FILTER)
        _installed = True


__all__ = ["LOGGERS", "MASK", "RedactFilter", "install", "redact", "redact_log"]
