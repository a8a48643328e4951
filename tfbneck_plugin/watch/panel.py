"""The live terminal panel of ``tfbneck watch`` (rich): per-core bars as htop draws them,
the process tree, accelerators, disk and network, and the triage line; plus the key reader
(``q`` quits, ``c`` captures) that puts the terminal in cbreak mode while the panel runs."""
from __future__ import annotations

import os
import select
import sys
from typing import Any, Dict, List, Optional

#: Colour of each triage kind in the panel.
KIND_STYLE = {"device": "green", "cpu": "red", "io": "yellow", "network": "magenta", "unclear": "white"}


class KeyReader:
    """Single key presses from the terminal, without echo (cbreak mode), restored on exit.
    Without a terminal on standard input it reads nothing and only waits."""

    def __init__(self):
        self._fd: Optional[int] = None
        self._saved = None

    def __enter__(self) -> "KeyReader":
        if sys.stdin is not None and sys.stdin.isatty():
            import termios
            import tty
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None and self._saved is not None:
            import termios
            try:
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            except (termios.error, OSError):
                pass  # the terminal is gone (a hangup): nothing to restore

    def read(self, timeout: float) -> Optional[str]:
        """One key (lower case) pressed within ``timeout`` seconds, else None."""
        if self._fd is None:
            select.select([], [], [], timeout)
            return None
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return None
        ch = os.read(self._fd, 1)
        return ch.decode("latin-1").lower() if ch else None


def _bar(pct: float, width: int) -> str:
    filled = max(0, min(width, round(pct / 100.0 * width)))
    return "|" * filled + " " * (width - filled)


def render_panel(recent: Optional[Dict], run, pid: int, args, capturer, elapsed_s: float, size):
    """The panel for the last seconds of samples ``recent`` (``SystemRun.recent``), sized to
    the terminal ``size`` (rich's ``ConsoleDimensions``); a rich renderable."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text
    width = max(int(getattr(size, "width", 80)), 40)
    ends = "q quits and ends the command" if getattr(args, "target_command", None) else "q quits"
    head = Text(f"tfbneck watch — pid {pid}  {elapsed_s:5.0f} s  ({ends}"
                + (", c captures" if capturer is not None else "") + ")", style="bold")
    if recent is None:
        return Group(head, Text("waiting for the first sample..."))
    bar_w = max(10, width // 2 - 16)
    cores = Table.grid(padding=(0, 1))
    per_core = recent.get("per_core_pct") or []
    for i in range(0, len(per_core), 2):
        row = []
        for j in (i, i + 1):
            if j < len(per_core):
                row.append(f"{j:>3} [{_bar(per_core[j], bar_w)}] {per_core[j]:5.1f}%")
        cores.add_row(*row)
    facts = Table.grid(padding=(0, 2))
    thread = recent.get("busiest_thread_pct")
    facts.add_row("process tree", f"{recent['tree_cores']:.2f} cores of {run.cpu_count}",
                  f"busiest thread {thread:.0f} %" if thread is not None else "",
                  f"run-queue wait {recent['runq_wait_pct']:.0f} %" if recent.get("runq_wait_pct") is not None else "")
    facts.add_row("other processes", f"{recent['other_cores']:.2f} cores", "", "")
    for g in recent.get("gpus") or []:
        facts.add_row(f"accelerator {g['index']}", f"util {g['util_pct']:.0f} %", f"memory {g['mem_used_gb']:.1f} GB", "")
    if not recent.get("gpus"):
        facts.add_row("accelerators", "none seen (NVML)", "", "")
    facts.add_row("disk", f"read {recent['disk_read_MBps']:.1f} MB/s",
                  f"by the tree {recent['tree_disk_read_MBps']:.1f} MB/s",
                  f"I/O wait {recent['iowait_pct'] or 0:.0f} %")
    facts.add_row("network", f"in {recent['net_recv_MBps']:.2f} MB/s", f"out {recent['net_sent_MBps']:.2f} MB/s",
                  "loopback excluded")
    t = recent["triage"]
    line = Text.assemble(("triage: ", "bold"), (t["bottleneck"], f"bold {KIND_STYLE.get(t['bottleneck'], 'white')}"),
                         f" — {t['reason']}")
    # The verdict right under the title: a small terminal crops the bottom, never the triage.
    parts: List[Any] = [head, line]
    if t.get("caveat"):
        parts.append(Text(t["caveat"], style="dim"))
    parts += [cores, facts]
    if capturer is not None:
        parts.append(Text(capturer.status_line()))
    return Group(*parts)
