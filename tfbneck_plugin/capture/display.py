"""The callback's notebook display: where ``BottleneckProfiler(display=True)`` shows each
profiling window's verdict (a cell output reserved when the window closes, filled when its
analysis is done). No TensorFlow; IPython only when a notebook is running.
"""
from __future__ import annotations

import html
import sys
from typing import Dict

from ..session_report import SessionReport


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (Jupyter, JupyterLab, Colab, VS Code): IPython's shell
    there has a ``kernel``; a terminal IPython or a plain script has none. IPython is not
    imported to find out (a script that never imported it is not in a notebook)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


class WindowDisplay:
    """A cell output reserved for one profiling window's verdict.

    Create it on the training thread when the window closes (the output then belongs to
    the cell that runs ``fit``); call :meth:`show` from the background analysis thread,
    which replaces the placeholder in place (IPython display ids are routed by id, not by
    the thread that sends them). Never raises: a display problem must not touch training.
    """

    def __init__(self, label: str):
        self._handle = None
        try:
            from IPython.display import HTML, display
            self._handle = display(HTML(f'<div class="tfbneck-report"><p>tfbneck: analysing {_e(label)}…</p>'
                                        '</div>'), display_id=True)
        except Exception:
            self._handle = None

    def show(self, report: Dict) -> bool:
        """Replace the placeholder by the window's report; True when it was displayed."""
        return show_window_report(report, self._handle)


def show_window_report(report: Dict, handle=None) -> bool:
    """Show one window's session report in the notebook (what ``display=True`` does).

    Args:
      report: the session report dict of the window (the analyzer's output).
      handle: an IPython ``DisplayHandle`` to update in place (see :class:`WindowDisplay`),
        or None to display a new output in the current cell.
    Returns:
      True when displayed; False outside IPython or when displaying failed (never raises).
    """
    try:
        from IPython.display import display

        rich = report if isinstance(report, SessionReport) else SessionReport.from_dict(report)
        if handle is not None:
            handle.update(rich)
        else:
            display(rich)
        return True
    except Exception:
        return False
