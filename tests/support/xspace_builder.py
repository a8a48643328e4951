"""Builds XSpace protobufs with exact, known timings, using the project's own schema.

Times are given in microseconds for readability and stored in ps. Example::

    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    py.event("train", 0, 10_000, step_num=1, _r=1)
    b.write(tmp_path / "run/plugins/profile/s1/host.xplane.pb")
"""
from __future__ import annotations

import os
from typing import Dict, Optional

from tfbneck_plugin.trace import xspace

US = 1_000_000  # ps per us


class PlaneBuilder:
    def __init__(self, proto):
        self.proto = proto
        self._event_ids: Dict[str, int] = {}
        self._stat_ids: Dict[str, int] = {}

    def event_id(self, name: str) -> int:
        if name not in self._event_ids:
            mid = len(self._event_ids) + 1
            self._event_ids[name] = mid
            md = self.proto.event_metadata[mid]
            md.id = mid
            md.name = name
        return self._event_ids[name]

    def stat_id(self, name: str) -> int:
        if name not in self._stat_ids:
            sid = len(self._stat_ids) + 1
            self._stat_ids[name] = sid
            md = self.proto.stat_metadata[sid]
            md.id = sid
            md.name = name
        return self._stat_ids[name]

    def set_stat(self, stat, name, value):
        stat.metadata_id = self.stat_id(name)
        if isinstance(value, bool):
            stat.int64_value = int(value)
        elif isinstance(value, int):
            if value >= 2 ** 63:
                stat.uint64_value = value
            else:
                stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.str_value = str(value)

    def plane_stat(self, name, value):
        self.set_stat(self.proto.stats.add(), name, value)
        return self

    def line(self, name: str, line_id: Optional[int] = None, timestamp_ns: int = 1_000_000) -> "LineBuilder":
        l = self.proto.lines.add()
        l.id = line_id if line_id is not None else len(self.proto.lines)
        l.name = name
        l.timestamp_ns = timestamp_ns
        return LineBuilder(self, l)


class LineBuilder:
    def __init__(self, plane: PlaneBuilder, proto):
        self.plane = plane
        self.proto = proto

    def event(self, name: str, start_us: float, dur_us: float, **stats) -> "LineBuilder":
        """Add an event starting at ``start_us`` (relative to a common origin) lasting ``dur_us``."""
        e = self.proto.events.add()
        e.metadata_id = self.plane.event_id(name)
        # Absolute origin: the line timestamp is 1 ms; offsets are relative to it.
        e.offset_ps = int(round(start_us * US)) - (self.proto.timestamp_ns * 1000 - 1_000_000 * 1000)
        e.duration_ps = int(round(dur_us * US))
        for k, v in stats.items():
            self.plane.set_stat(e.stats.add(), k, v)
        return self


class SpaceBuilder:
    def __init__(self, hostname: str = "testhost"):
        self.proto = xspace.XSpace()
        self.proto.hostnames.append(hostname)

    def plane(self, name: str) -> PlaneBuilder:
        p = self.proto.planes.add()
        p.id = len(self.proto.planes)
        p.name = name
        return PlaneBuilder(p)

    def bytes(self) -> bytes:
        return self.proto.SerializeToString()

    def write(self, path) -> str:
        path = str(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(self.bytes())
        return path


def session_path(root, run: str = "run", session: str = "2024_01_01_00_00_00", host: str = "testhost") -> str:
    return os.path.join(str(root), run, "plugins", "profile", session, f"{host}.xplane.pb")
