"""Session chunks in, Proton's tree of metrics (``.hatchet``) out: what ``proton-viewer`` reads.

``proton-viewer -m normalized_cycles NAME.hatchet`` (Triton's own viewer) shows it. The tree is
the one Proton's instrumentation mode writes, a JSON list of the root frame and the devices::

    ROOT                          cycles 0, normalized_cycles 0, time (ns) 0, count 0
      outer                       host scopes (``proton_ik.scope``), outermost first
        inner
          add_1024                the launch's name (``launch_metadata``'s; else the kernel's)
            load                  a scope of the kernel, with its metrics
              inner_loop          a scope that began while ``load`` was open on the unit

A scope's frame sums its events over the launches of one name under one host scope path:
``cycles`` (durations in SM cycles), ``normalized_cycles`` (each launch's cycles over its units:
what one unit spent in the scope, as Proton divides by warps times CTAs), ``time (ns)`` and
``count`` (events), so that ``-m avg_time/ns`` works too. As in Proton's trees, a scope's
inclusive metrics add its nested scopes' to its own, which already hold them. Nesting is as the
scopes ran, not as the code reads: a scope whose enclosing scope's begin was lost to the ring
sits under the launch.

Streaming: each chunk's events are folded into sums per (launch, scope path) and dropped; a
launch's sums join the tree when its last piece (and so its unit count) is known. What is kept
is the tree: a few numbers per frame.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from proton_ik.viewer.tables import Chunk

ROOT = "ROOT"
CUDA = "1"  # Proton's DeviceType::CUDA, as its cycle metrics name the device type
_METRICS = ("cycles", "normalized_cycles", "time (ns)", "count")


class HatchetWriter:
    """Writes a session's chunks, in launch order, as one ``.hatchet`` tree; use it as a context manager."""

    def __init__(self, path: str | Path, info: Mapping[str, Any]):
        self.path = Path(path)
        self.info = dict(info)
        # Scope paths within a launch: index 0 is the launch itself.
        self._scope_paths: list[tuple[str, ...]] = [()]
        self._scope_index: dict[tuple[int, str], int] = {}
        # Per launch not yet ended: scope path -> cycles, time and count so far.
        self._pending: dict[int, dict[int, np.ndarray]] = {}
        self._frames = _Frames()
        self._devices: dict[str, float] = {}  # device id -> SM clock (MHz) of its first launch

    def add(self, chunk: Chunk) -> None:
        """Fold a chunk's events into per-launch sums; graft the launches that end here into the tree."""
        events = chunk.events
        if len(events["launch"]):
            path = self._scope_path_of(events, chunk.scopes)
            launch = events["launch"]
            numbers, local = np.unique(launch, return_inverse=True)
            width = len(self._scope_paths)
            key, inverse = np.unique(local * width + path, return_inverse=True)
            sums = np.stack(
                [
                    np.bincount(inverse, events["dur_cycles"], minlength=len(key)),
                    np.bincount(inverse, events["dur_ns"], minlength=len(key)),
                    np.bincount(inverse, minlength=len(key)).astype(np.float64),
                ],
                axis=1,
            )
            for (which, scope_path), row in zip(_pairs(key, width), sums, strict=True):
                number = int(numbers[which])
                pending = self._pending.setdefault(number, {})
                if scope_path in pending:
                    pending[scope_path] += row
                else:
                    pending[scope_path] = row.copy()
        for row in chunk.launches:
            self._graft(row, chunk.host_paths.get(int(row["launch"]), ()))

    def close(self) -> Path:
        """Write the tree and the devices."""
        # proton-viewer's -m util reads the device's architecture, SM count, SM clock (kHz),
        # memory clock (kHz) and bus width (bits): the session records them at its start.
        devices = {
            device: {"clock_rate": round(mhz * 1000), "memory_clock_rate": _whole(self.info.get("memory_clock_rate")),
                     "bus_width": _whole(self.info.get("bus_width")), "arch": str(self.info.get("arch", "")),
                     "num_sms": _whole(self.info.get("sm_count"))}
            for device, mhz in self._devices.items()
        }  # fmt: skip
        tree = self._frames.json()
        self.path.write_text(json.dumps([tree, {"CUDA": devices} if devices else {}]))
        return self.path

    def __enter__(self) -> HatchetWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _scope_path_of(self, events: Mapping[str, np.ndarray], scopes: tuple[str, ...]) -> np.ndarray:
        """Each event's scope path within its launch (an index into ``_scope_paths``): its scope
        under the scope that was open on its unit one level out when it began."""
        n = len(events["launch"])
        order = np.lexsort((events["begin_record"], events["unit"], events["cta"], events["launch"]))
        depth = events["depth"][order]
        scope = events["scope"][order]
        unit_key = np.stack([events[name][order] for name in ("launch", "cta", "unit")])
        new_unit = np.ones(n, dtype=bool)
        new_unit[1:] = (unit_key[:, 1:] != unit_key[:, :-1]).any(axis=0)
        unit_start = np.maximum.accumulate(np.where(new_unit, np.arange(n), 0))
        path = np.zeros(n, dtype=np.int64)
        for level in range(int(depth.max(initial=-1)) + 1):
            here = np.flatnonzero(depth == level)
            if level == 0:
                parent = np.zeros(len(here), dtype=np.int64)
            else:
                last = np.maximum.accumulate(np.where(depth == level - 1, np.arange(n) + 1, 0)) - 1
                found = last[here] >= unit_start[here]
                parent = np.where(found, path[np.maximum(last[here], 0)], 0)
            pairs, inverse = np.unique(parent * len(scopes) + scope[here], return_inverse=True)
            codes = np.array(
                [self._scope(p // len(scopes), scopes[p % len(scopes)]) for p in pairs.tolist()],
                dtype=np.int64,
            )
            path[here] = codes[inverse]
        result = np.empty(n, dtype=np.int64)
        result[order] = path
        return result

    def _scope(self, parent: int, name: str) -> int:
        index = self._scope_index.get((parent, name))
        if index is None:
            index = self._scope_index[(parent, name)] = len(self._scope_paths)
            self._scope_paths.append((*self._scope_paths[parent], name))
        return index

    def _graft(self, row: Mapping[str, Any], host_path: tuple[str, ...]) -> None:
        """Add an ended launch's sums to the frames of its host scopes, name and scopes."""
        launch = self._frames.frame((*host_path, str(row.get("name") or row["kernel"])))
        device = str(row.get("device") if row.get("device") is not None else 0)
        self._devices.setdefault(device, float(row.get("mhz") or 0))
        units = int(row.get("units") or 0)
        # hook="triton": the launch's own metrics (bytes, flops16, ...) on its frame, as Proton's
        metrics = row.get("launch_metrics")
        if isinstance(metrics, Mapping):
            self._frames.add_launch_metrics(launch, metrics, device)
        for scope_path, (cycles, time, count) in self._pending.pop(int(row["launch"]), {}).items():
            frame = self._frames.frame(self._scope_paths[scope_path], launch)
            self._frames.add(frame, cycles, cycles / units if units else 0.0, time, count, device)


def _whole(value: object) -> int:
    """A device property from the session info, or 0 where the session has none."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _pairs(key: np.ndarray, width: int) -> list[tuple[int, int]]:
    which, path = np.divmod(key, width)
    return list(zip(which.tolist(), path.tolist(), strict=True))


class _Frames:
    """The tree: frames by path under the root, and the metrics summed into them."""

    def __init__(self) -> None:
        self.names = [ROOT]
        self.children: list[list[int]] = [[]]
        self.index: dict[tuple[int, str], int] = {}
        self.metrics: dict[int, list[float]] = {}
        self.launch_metrics: dict[int, dict[str, float]] = {}  # a launch frame's bytes, flops, ...
        self.device: dict[int, str] = {}

    def frame(self, path: tuple[str, ...], under: int = 0) -> int:
        for name in path:
            child = self.index.get((under, name))
            if child is None:
                child = self.index[(under, name)] = len(self.names)
                self.names.append(name)
                self.children.append([])
                self.children[under].append(child)
            under = child
        return under

    def add(
        self, frame: int, cycles: float, normalized: float, time: float, count: float, device: str
    ) -> None:
        sums = self.metrics.setdefault(frame, [0.0] * len(_METRICS))
        for i, value in enumerate((cycles, normalized, time, count)):
            sums[i] += value
        self.device.setdefault(frame, device)

    def add_launch_metrics(self, frame: int, metrics: Mapping[str, Any], device: str) -> None:
        sums = self.launch_metrics.setdefault(frame, {})
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                sums[str(name)] = sums.get(str(name), 0.0) + float(value)
        self.device.setdefault(frame, device)

    def json(self) -> dict[str, Any]:
        """The tree as Proton's JSON: each frame's name, metrics and children."""

        def node(frame: int) -> dict[str, Any]:
            metrics: dict[str, Any] = {}
            if frame == 0:
                # "bytes" on the root (an internal frame), so that -m util finds the column even
                # where no launch gave bytes: their frames read NaN there, not an error.
                metrics = {**dict.fromkeys(_METRICS, 0), "bytes": 0}
            elif frame in self.metrics:
                cycles, normalized, time, count = self.metrics[frame]
                metrics = {
                    "cycles": int(cycles),
                    "normalized_cycles": normalized,
                    "time (ns)": int(time),
                    "count": int(count),
                    "device_id": self.device[frame],
                    "device_type": CUDA,
                }
            if frame in self.launch_metrics:
                metrics = {
                    **metrics,
                    **self.launch_metrics[frame],
                    "device_id": self.device[frame],
                    "device_type": CUDA,
                }
            return {
                "frame": {"name": self.names[frame], "type": "function"},
                "metrics": metrics,
                "children": [node(child) for child in self.children[frame]],
            }

        return node(0)
