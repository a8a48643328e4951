"""Remote logdirs (fsspec URLs such as ``s3://`` and ``gs://``): bounded waits, one-line causes.

Object-store clients wait a long time before they give up: gcsfs retries each request six
times with exponential backoff (``gcsfs/retry.py``, about 30 s per call), botocore retries
with backoff too, and looking for Google credentials on a machine that has none probes the
GCE metadata server (``google/auth/compute_engine/_metadata.py``) for about 15 s (measured
here). Without network that made ``tfbneck analyze gs://...`` answer after 82 s with a hundred
lines of library tracebacks. Here:

* Before any client is built, one TCP connection to the storage endpoint (``s3.amazonaws.com``
  or ``endpoint_url`` / ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for ``s3://``;
  ``storage.googleapis.com`` or ``STORAGE_EMULATOR_HOST`` for ``gs://``) tells an unreachable
  host at once. It is skipped when a proxy is configured or the AWS config file names an
  endpoint (the real endpoint is then not known here).
* Finding credentials and the first listing request get :func:`timeout_s` seconds in all
  (default :data:`DEFAULT_TIMEOUT_S`; ``TFBNECK_REMOTE_TIMEOUT`` or ``tfbneck analyze
  --remote-timeout``). A store that has answered once is then given its own per-request
  limits: s3fs gets ``connect_timeout``/``read_timeout`` and two attempts, gcsfs
  ``requests_timeout``.
* Each failure is classified into one cause (:data:`CAUSES`) and one line that names the URL.
* The libraries' loggers (:data:`LIBRARY_LOGGERS`) are raised to CRITICAL, unless the
  application has set their level, so their retry tracebacks never reach the terminal.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import threading
from typing import Callable, Dict, List, Optional, Tuple, TypeVar
from urllib.parse import urlsplit
from .errors import TfbneckError, first_line

#: Seconds allowed, by default, to reach a store, find credentials and get a first listing.
DEFAULT_TIMEOUT_S = 10.0
TIMEOUT_ENV = "TFBNECK_REMOTE_TIMEOUT"

#: cause -> words used in the one-line message.
CAUSES: Dict[str, str] = {
    "no_credentials": "no credentials",
    "host_unreachable": "host unreachable",
    "bucket_missing": "bucket missing",
    "permission_denied": "permission denied",
    "not_found": "no such file or directory",
    "timeout": "no answer",
    "no_scheme": "cannot read this URL scheme",
    "other": "storage error",
}

#: Loggers of the storage stack that print retry tracebacks (gcsfs logs ``out of retries``
#: with ``logger.exception``; botocore and google.auth log credential lookups).
LIBRARY_LOGGERS = ("botocore", "aiobotocore", "boto3", "s3transfer", "s3fs", "gcsfs", "fsspec",
                   "urllib3", "google.auth", "google_auth_httplib2", "google.cloud", "aiohttp")

_timeout_override: Optional[float] = None
T = TypeVar("T")


class RemoteError(TfbneckError):
    """A remote logdir that cannot be read. ``str()`` is one line naming the URL;
    ``cause`` is a key of :data:`CAUSES`."""

    def __init__(self, url: str, cause: str, detail: str = ""):
        self.url, self.cause, self.detail = url, cause, detail
        words = CAUSES.get(cause, cause)
        super().__init__(f"{url}: {words}" + (f" ({detail})" if detail else ""))


def set_timeout(seconds: Optional[float]) -> None:
    """Use ``seconds`` instead of ``TFBNECK_REMOTE_TIMEOUT`` (None: back to the variable).

    Raises:
      ValueError: ``seconds`` is not a positive number.
    """
    global _timeout_override
    if seconds is not None and not seconds > 0:
        raise ValueError(f"remote timeout must be a positive number of seconds, not {seconds!r}")
    _timeout_override = seconds


def timeout_s() -> float:
    """Seconds allowed to reach a store and get its first answer: :func:`set_timeout`'s
    value, else ``TFBNECK_REMOTE_TIMEOUT``, else :data:`DEFAULT_TIMEOUT_S`. A variable that
    is not a positive number is ignored."""
    if _timeout_override is not None:
        return _timeout_override
    try:
        value = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def quiet_library_loggers(extra: Tuple[str, ...] = ()) -> None:
    """Raise the storage libraries' loggers to CRITICAL where the application left their
    level unset: the error that matters reaches the user as one line instead."""
    for name in LIBRARY_LOGGERS + tuple(extra):
        log = logging.getLogger(name)
        if log.level == logging.NOTSET:
            log.setLevel(logging.CRITICAL)


def _storage_options(protocol: str, timeout: float) -> Dict:
    """Per-request limits for the clients we know, merged under the user's fsspec config
    (``~/.config/fsspec``, ``FSSPEC_<PROTOCOL>_...``), which wins."""
    import fsspec.config
    user = fsspec.config.conf.get(protocol, {})
    if protocol in ("s3", "s3a"):
        # botocore's Config: connect/read timeouts (s) and total attempts per request.
        config = {"connect_timeout": min(timeout, 5.0), "read_timeout": max(timeout, 15.0),
                  "retries": {"total_max_attempts": 2}}
        config.update(user.get("config_kwargs") or {})
        options: Dict = {"config_kwargs": config}
        client = dict(user.get("client_kwargs") or {})
        env_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if env_endpoint and not (user.get("endpoint_url") or client.get("endpoint_url")):
            # botocore reads these variables only since 1.31; older ones (s3fs 2023.1's)
            # would silently go to AWS instead.
            options["client_kwargs"] = dict(client, endpoint_url=env_endpoint)
        return options
    if protocol in ("gs", "gcs"):
        return {} if "requests_timeout" in user else {"requests_timeout": max(timeout, 15.0)}
    return {}


def filesystem(url: str):
    """``(fs, path)`` for an fsspec URL, with the per-request limits of this module.

    Raises:
      RemoteError: cause ``no_scheme`` (the scheme's package is missing or unknown).
    """
    import fsspec
    protocol = url.split("://", 1)[0].lower()
    try:
        fs, path = fsspec.core.url_to_fs(url, **_storage_options(protocol, timeout_s()))
    except ImportError as err:  # e.g. s3fs / gcsfs not installed for this scheme
        raise RemoteError(url, "no_scheme", f"{err}; pip install '.[remote]' in the tfbneck clone") from None
    except ValueError as err:
        raise RemoteError(url, "no_scheme", f"unknown URL scheme: {err}") from None
    if protocol in ("s3", "s3a") and getattr(fs, "retries", 0) > 2:
        fs.retries = 2  # s3fs' own retry loop around each call (5 by default)
    return fs, path


def endpoint(url: str) -> Optional[Tuple[str, int]]:
    """``(host, port)`` that a request for ``url`` connects to first, or None when it
    cannot be told here (other schemes, a proxy, an endpoint in the AWS config file)."""
    import fsspec.config
    protocol = url.split("://", 1)[0].lower()
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                                       "ALL_PROXY", "all_proxy")):
        return None
    user = fsspec.config.conf.get(protocol, {})
    if protocol in ("s3", "s3a"):
        target = (user.get("endpoint_url") or (user.get("client_kwargs") or {}).get("endpoint_url")
                  or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
        if not target:
            if _aws_config_names_endpoint():
                return None
            target = "https://s3.amazonaws.com"
    elif protocol in ("gs", "gcs"):
        target = user.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST") or \
            "https://storage.googleapis.com"
    else:
        return None
    parts = urlsplit(target if "://" in target else f"http://{target}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _aws_config_names_endpoint() -> bool:
    path = os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "endpoint_url" in f.read()
    except OSError:
        return False


def check_reachable(url: str, timeout: float) -> None:
    """One TCP connection to ``url``'s storage endpoint (see :func:`endpoint`).

    Raises:
      RemoteError: cause ``host_unreachable`` (name not resolved, connection refused,
        network unreachable, no answer within ``timeout`` seconds).
    """
    target = endpoint(url)
    if target is None:
        return
    host, port = target
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror as err:
        raise RemoteError(url, "host_unreachable", f"cannot resolve {host}: {err.strerror}") from None
    except socket.timeout:
        raise RemoteError(url, "host_unreachable", f"{host}:{port} did not answer within {timeout:g} s") from None
    except OSError as err:
        why = "connection refused" if err.errno == errno.ECONNREFUSED else (err.strerror or str(err)).lower()
        raise RemoteError(url, "host_unreachable", f"{host}:{port}: {why}") from None


def within(seconds: float, url: str, stage: list, fn: Callable[[], T]) -> T:
    """``fn()`` on a daemon thread, waited for at most ``seconds``.

    Args:
      stage: a one-item list that ``fn`` updates with what it is doing (for the message).

    Raises:
      RemoteError: cause ``timeout`` after ``seconds``; whatever ``fn`` raised, unchanged.
    """
    box: Dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err

    worker = threading.Thread(target=run, name="tfbneck-remote", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        # The same line reaches the CLI and the TensorBoard tab: name the variable both read
        # (TensorBoard has no flag for it), and the CLI's flag as the CLI's.
        raise RemoteError(url, "timeout", f"within {seconds:g} s while {stage[0]}; wait longer with "
                                          f"{TIMEOUT_ENV}=SECONDS in the environment (tfbneck analyze "
                                          f"also takes --remote-timeout SECONDS)")
    if "error" in box:
        raise box["error"]
    return box["value"]


_CREDENTIAL_ERRORS = {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError",
                      "CredentialRetrievalError", "RefreshError"}
_CONNECT_ERRORS = {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError",
                   "ClientConnectorError", "ClientConnectorDNSError", "ServerTimeoutError", "gaierror",
                   "ConnectionRefusedError", "ConnectionResetError", "ProxyConnectionError",
                   "ClientOSError", "ServerDisconnectedError", "ReadTimeoutError", "TimeoutError",
                   "TransportError"}  # google.auth: the token endpoint could not be reached
_DENIED_WORDS = ("AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                 "Unauthorized", "does not have storage", "401", "403")


def classify(url: str, err: BaseException, anonymous: bool = False) -> RemoteError:
    """The one-line error for what a listing of ``url`` raised.

    Args:
      err: the exception, with its ``__cause__``/``__context__`` chain.
      anonymous: the client found no credentials and fell back to anonymous access
        (gcsfs does): a refusal then means no credentials.
    """
    if isinstance(err, RemoteError):
        return err
    chain: List[BaseException] = []
    seen = set()
    e: Optional[BaseException] = err
    while e is not None and id(e) not in seen and len(chain) < 12:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    names = {type(x).__name__ for x in chain}
    text = " ".join(str(x) for x in chain)
    detail = _first_line(err) or type(err).__name__
    if names & _CREDENTIAL_ERRORS:
        return RemoteError(url, "no_credentials", detail)
    if any(isinstance(x, FileNotFoundError) for x in chain) or "NoSuchBucket" in text:
        lower = text.lower()
        if "bucket" in lower and ("not exist" in lower or "nosuchbucket" in lower or "not found" in lower):
            return RemoteError(url, "bucket_missing", detail)
        return RemoteError(url, "not_found")
    if any(isinstance(x, PermissionError) for x in chain) or any(w in text for w in _DENIED_WORDS):
        return RemoteError(url, "no_credentials" if anonymous else "permission_denied",
                           ("anonymous access refused: " if anonymous else "") + detail)
    if names & _CONNECT_ERRORS or any(isinstance(x, (ConnectionError, socket.timeout)) for x in chain):
        return RemoteError(url, "host_unreachable", detail)
    return RemoteError(url, "other", f"{type(err).__name__}: {detail}")


def _first_line(err: BaseException, limit: int = 200) -> str:
    msg = first_line(err)
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


def is_anonymous(fs) -> bool:
    """Whether ``fs`` fell back to anonymous access (gcsfs with no credentials found)."""
    creds = getattr(fs, "credentials", None)
    return getattr(creds, "method", None) == "anon" or getattr(fs, "anon", False) is True
