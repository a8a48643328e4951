"""How ``BottleneckProfiler`` never hurts training: its messages, its guard, and the check that
``log_dir`` can take sessions.

* :class:`WarnOnce`: one WARNING per kind of problem on the logger ``"tfbneck"``; repeats of a
  kind go to DEBUG.
* :class:`Guard`: runs the callback's work; the first unexpected error turns profiling off
  for the rest of the run (said once), stops what the open window runs, and never reaches
  training.
* :class:`LogDirState`: whether ``log_dir`` can be written, checked when each ``fit`` begins
  (an unwritable one skips every window and every trend-file write, said once).

No TensorFlow here.
"""
from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Callable, Optional, Set

#: Messages go to this logger: problems at WARNING, the per-window verdict at INFO.
logger = logging.getLogger("tfbneck")


class WarnOnce:
    """``warn(key, message, repeat=None)``: one WARNING per kind of problem (``key``); a repeat
    of a kind goes to DEBUG as ``repeat`` (nothing when ``repeat`` is None).

    Args:
      log: where the messages go (default: the logger ``"tfbneck"``).

    Attributes:
      said: the keys warned about so far.
    """

    def __init__(self, log: logging.Logger = logger):
        self._log = log
        self.said: Set[str] = set()

    def __call__(self, key: str, message: str, repeat: Optional[str] = None) -> None:
        if key in self.said:
            if repeat:
                self._log.debug(repeat)
            return
        self.said.add(key)
        self._log.warning(message)


class Guard:
    """``guard(fn, *args)``: runs ``fn(*args)`` and returns its result; an unexpected error is
    never raised into training.

    The first error turns profiling off for the rest of the run: :attr:`disabled` keeps why,
    one warning (key ``"internal"``) says so, ``cleanup(reason)`` stops what the open window
    runs, and every later call returns None without running ``fn``.

    Args:
      warn: ``warn(key, message)``, one warning per kind (:class:`WarnOnce`).
      cleanup: called once, after the first error, with :attr:`disabled`; its own errors are
        logged at DEBUG only.

    Attributes:
      disabled: ``"<exception type>: <message>"`` of the first error, None while profiling is on.
    """

    def __init__(self, warn: Callable[[str, str], None], cleanup: Callable[[str], None]):
        self._warn, self._cleanup = warn, cleanup
        self.disabled: Optional[str] = None

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.disabled is not None:
            return None
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - never let profiling stop training
            self.disabled = f"{type(err).__name__}: {err}"
            logger.debug("BottleneckProfiler internal error", exc_info=True)
            self._warn("internal", f"internal error, profiling is off for the rest of this run "
                                   f"(training continues): {self.disabled}")
            try:
                self._cleanup(self.disabled)
            except Exception:  # noqa: BLE001 - best effort
                logger.debug("BottleneckProfiler cleanup error", exc_info=True)
            return None


class LogDirState:
    """Whether the callback's ``log_dir`` can hold sessions.

    Args:
      log_dir: the callback's ``log_dir``.
      warn: ``warn(key, message)``, one warning per kind: an unwritable ``log_dir`` is said
        once (key ``"log_dir"``).

    Attributes:
      problem: None when the last :meth:`check` could write there (and before the first),
        else its one-line reason.
    """

    def __init__(self, log_dir: str, warn: Callable[[str, str], None]):
        self.log_dir, self._warn = log_dir, warn
        self.problem: Optional[str] = None

    def check(self) -> Optional[str]:
        """Write and remove a probe file in ``<log_dir>/plugins/profile/`` (created if need
        be); sets and returns :attr:`problem`, warned about when there is one."""
        self.problem = writable_problem(self.log_dir)
        if self.problem:
            self._warn("log_dir", f"{self.problem}: no profiling window will be recorded (training continues)")
        return self.problem


def writable_problem(log_dir: str) -> Optional[str]:
    """None when ``log_dir`` can hold sessions, else a one-line reason."""
    probe = None
    try:
        folder = os.path.join(log_dir, "plugins", "profile")
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".tfbneck-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
        return None
    except OSError as err:
        if probe is not None:  # created, but the write failed (disk full): do not leave it behind
            try:
                os.unlink(probe)
            except OSError:
                pass
        return f"log_dir {log_dir} is not writable ({type(err).__name__}: {err.strerror or err})"
