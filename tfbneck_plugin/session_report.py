"""One session's report as a Python object: the report dict itself, with the text
``repr`` a terminal shows and the HTML a notebook displays. What
:func:`tfbneck_plugin.analyze` returns per session (a :class:`tfbneck_plugin.api.Report` holds
them) and what each ``BottleneckProfiler`` window's ``report`` is. No TensorFlow.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from .notebook import session as notebook
from .render.report import breakdown_line, fix_first_lines, verdict_line
from .schema import step_time_ms


class SessionReport(dict):
    """One session's report: the dict of the report contract (the manual's report page,
    ``docs/report.md``), with a rich display.

    It *is* a dict (``r["bottleneck"]``, ``json.dumps(r)`` and code written for the CLI's
    JSON keep working); the properties below are shortcuts. In a notebook it displays as
    the verdict card, the step-time chart (SVG), the tf.data stages and the first
    recommendations; ``repr()`` is plain text for terminals.
    """

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SessionReport":
        """Wrap a session report dict (e.g. one of ``--format json``'s ``sessions``, or a
        ``BottleneckProfiler`` window's ``report``). Raises TypeError for anything else."""
        if not isinstance(data, dict):
            raise TypeError(f"a session report is a dict, not {type(data).__name__}")
        return cls(data)

    run = property(lambda self: self.get("run"), doc="Run path, relative to the logdir given.")
    session = property(lambda self: self.get("session"), doc="Session folder name.")
    status = property(lambda self: self.get("status"), doc="``ok`` or ``error``.")
    error = property(lambda self: self.get("error"), doc="One line naming the file, when status is error.")
    bottleneck = property(lambda self: self.get("bottleneck", "unknown"),
                          doc="``cpu``, ``device``, ``io``, ``network`` or ``unknown``.")
    cause = property(lambda self: self.get("cause"), doc="The finer cause, e.g. ``input_preprocessing``.")
    confidence = property(lambda self: self.get("confidence"), doc="0-1.")
    evidence = property(lambda self: list(self.get("evidence") or []), doc="Sentences with the numbers.")
    recommendations = property(lambda self: list(self.get("recommendations") or []),
                               doc="``title``, ``detail``, ``code`` (snippet or None) each.")

    def to_json(self, indent: Optional[int] = 2) -> str:
        """This session as JSON (the objects of ``--format json``'s ``sessions`` list)."""
        return json.dumps(self, indent=indent)

    def __repr__(self) -> str:
        # What the CLI's table says of a session after its row: verdict, evidence, first fix.
        title = notebook.session_title(self)
        if self.get("status") != "ok":
            return f"{title}: ERROR {self.get('error')}"
        steps = self.get("steps") or {}
        mean = step_time_ms(self)
        lines = [verdict_line(self)]
        if self.get("cause_text"):
            lines.append(f"  {self['cause_text']}")
        lines.extend(fix_first_lines(self))  # the action first, as the CLI's table
        lines.append(f"  {steps.get('count', 0)} steps, {notebook.fmt_ms(mean)} mean step time, "
                     f"{self.get('device_kind') or '?'} device")
        lines.extend(f"  - {e}" for e in self.evidence)
        lines.extend(breakdown_line(self))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text/plain (it would print the dict otherwise)
        p.text(repr(self))

    def _repr_html_(self) -> str:
        return notebook.session_html(self)
