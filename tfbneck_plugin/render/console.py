"""Writing a command's report to standard output without a traceback: a closed standard
output, a full disk, a reader that stopped early (``| head``), or text the terminal's
encoding cannot take (a file name that is not UTF-8) each end in one line or quietly.
Used by every ``tfbneck`` command that prints a report."""
from __future__ import annotations

import os
import sys
from ..errors import TfbneckError


class OutputError(TfbneckError):
    """Standard output cannot take the report (closed, or its disk full); one line."""


def write_stdout(text: str, closed_hint: str = " (use --output FILE)") -> None:
    """Write the report to standard output. Raises OutputError (one line, ending with
    ``closed_hint`` when standard output is closed) when it cannot be written; a reader that
    stopped early (``| head``) ends quietly."""
    if sys.stdout is None:
        raise OutputError(f"standard output is closed: nowhere to write the report{closed_hint}")
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:  # a file name that is not UTF-8, on a strict UTF-8 terminal
            sys.stdout.flush()
            encoding = sys.stdout.encoding or "utf-8"
            try:
                data = text.encode(encoding, "surrogateescape")
            except UnicodeEncodeError:
                data = text.encode(encoding, "backslashreplace")
            sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        _detach_stdout()
    except OSError as err:
        _detach_stdout()
        raise OutputError(f"standard output: cannot write the report ({err.strerror or err})") from None


def _detach_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit does not
    fail again on what could not be written."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
