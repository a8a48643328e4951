"""Requests the Bottleneck tab refuses, and the strict reading of query parameters.

Every refusal is a :class:`RouteError`: an HTTP status, a one-line message and a
machine-readable ``error_kind`` (:data:`ROUTE_ERROR_KINDS`) that the frontend maps to its
own explanation, so it never has to match the English. No TensorFlow, no TensorBoard here.
"""
from __future__ import annotations

import re
from typing import Dict, Mapping, Optional
from urllib.parse import unquote_to_bytes
from ..errors import TfbneckError

#: Longest accepted query parameter value (characters).
MAX_PARAM_CHARS = 1024
#: Longest accepted query parameter name (characters).
MAX_NAME_CHARS = 64

#: ``error_kind`` of a refused request, by HTTP status (docs/http_api.md). ``not_found`` is
#: the session reports' kind of the same name (tfbneck_plugin/errors.py).
ROUTE_ERROR_KINDS: Dict[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    500: "internal",
    503: "scanning",
}


class RouteError(TfbneckError):
    """A request the plugin refuses.

    Attributes:
      status: the HTTP status (400, 404, 405, 500 or 503).
      message: one line saying what is wrong, never a traceback.
      kind: the ``error_kind`` (default: :data:`ROUTE_ERROR_KINDS` of ``status``).
    """

    def __init__(self, status: int, message: str, kind: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind or ROUTE_ERROR_KINDS.get(status, "internal")

    def body(self) -> Dict[str, str]:
        """The JSON body of the refusal: ``{"error": message, "error_kind": kind}``."""
        return {"error": self.message, "error_kind": self.kind}


def parse_query(query_string: str) -> Dict[str, str]:
    """Decode a WSGI ``QUERY_STRING`` strictly.

    werkzeug would silently replace invalid bytes with U+FFFD, which could then match
    nothing, or the wrong thing; this refuses them instead.

    Args:
      query_string: the raw query as WSGI passes it (PEP 3333: the URL's bytes, decoded as
        latin-1).

    Returns:
      ``{name: value}``, percent-decoded UTF-8 text.

    Raises:
      RouteError: 400 when a name or value is not valid UTF-8 after percent-decoding, holds
        control characters, is longer than :data:`MAX_PARAM_CHARS` (names:
        :data:`MAX_NAME_CHARS`), or a name is given twice.
    """
    raw = query_string.encode("latin-1", errors="replace")
    out: Dict[str, str] = {}
    for part in raw.split(b"&"):
        if not part:
            continue
        name_b, _, value_b = part.partition(b"=")
        try:
            name = unquote_to_bytes(name_b.replace(b"+", b" ")).decode("utf-8")
            value = unquote_to_bytes(value_b.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise RouteError(400, "query parameters must be UTF-8 text (percent-encoded in the URL)") from None
        if any(ord(c) < 32 or ord(c) == 127 for c in name + value):
            raise RouteError(400, f"query parameter {name[:40]!r} holds control characters")
        if len(name) > MAX_NAME_CHARS:
            raise RouteError(400, f"query parameter name {name[:40]!r}... is longer than {MAX_NAME_CHARS} characters")
        if len(value) > MAX_PARAM_CHARS:
            raise RouteError(400, f"query parameter {name[:40]!r} is longer than {MAX_PARAM_CHARS} characters")
        if name in out:
            raise RouteError(400, f"query parameter {name!r} is given more than once")
        out[name] = value
    return out


def required(params: Mapping[str, str], name: str) -> str:
    """The value of parameter ``name``; RouteError 400 when it is missing or empty."""
    value = params.get(name)
    if value is None or value == "":
        raise RouteError(400, f"missing query parameter {name!r}")
    return value


def check_run_name(run: str) -> None:
    """Refuse run names that are not a relative path inside the logdir.

    Run names are TensorBoard's: the run folder relative to the logdir, ``/``-separated,
    ``.`` for the logdir itself.

    Raises:
      RouteError: 400 for absolute paths (``/x``, ``~x``, ``C:x``), ``..`` segments and
        backslashes.
    """
    if run.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", run):
        raise RouteError(400, "run must be a path relative to the logdir; absolute paths are refused")
    if "\\" in run:
        raise RouteError(400, "run must use '/' between folders; backslashes are refused")
    if ".." in run.split("/"):
        raise RouteError(400, "run must stay inside the logdir; '..' is refused")


def check_session_name(session: str) -> None:
    """Refuse a session parameter that is not one folder name.

    Raises:
      RouteError: 400 when it holds ``/`` or ``\\``, or is ``.`` or ``..``.
    """
    if "/" in session or "\\" in session:
        raise RouteError(400, "session must be one folder name, without '/' or '\\'")
    if session in (".", ".."):
        raise RouteError(400, "session must be a session folder name; '.' and '..' are refused")
