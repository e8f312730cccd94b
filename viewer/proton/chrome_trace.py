"""``NAME.chrome_trace`` as Triton Proton writes it for its instrumentation mode, so that code
written for ``triton.profiler`` (its tests, its tutorials) reads ours where it read Proton's.

The schema is the one Proton's own tests read (``third_party/proton/test/test_instrumentation.py``):
``traceEvents`` holds only complete (``"X"``) events, one per scope instance per warp, in launch,
then CTA, then warp order, each warp's in the order they began; ``pid`` is ``"<kernel> Core<sm>
CTA<cta>"``, ``tid`` ``"warp <w> (line <l>)"`` (the row Proton's writer gives each of a warp's
events: by start, the first row where it overlaps no event already there, so that nested scopes
of one warp sit on rows of their own; ``proton_rows``), ``cat`` the kernel's name, and ``args``
holds ``call_stack`` (the host scopes open at the launch, then the launch's name), ``Init Time (ns)`` and ``Post Final
Time (ns)`` (the CTA's first start and last end, from the launch's first start) and
``Finalization Time (ns)``. Times are our calibrated nanoseconds (``ts`` and ``dur`` in
microseconds from the session's start), where Proton's are clock cycles read at 1 GHz; each
event's ``args`` says so (``time_unit``). Our own Chrome JSON (``chrome``) keeps its richer form.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from proton_ik.viewer.tables import Chunk

__all__ = ["ProtonChromeWriter"]

TIME_UNIT = "calibrated ns (Proton: cycles at 1 GHz)"


class ProtonChromeWriter:
    """Writes chunks of a session, in launch order, as Proton's ``.chrome_trace``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(b'{"displayTimeUnit":"us","traceEvents":[')
        self._written = 0
        # The rows of a launch that goes on into the next chunk wait for its last piece, so
        # that its CTAs come out in order.
        self._held: list[dict[str, np.ndarray]] = []
        self._held_units: list[dict[str, np.ndarray]] = []

    def add(self, chunk: Chunk) -> None:
        ending = {int(row["launch"]) for row in chunk.launches}
        events = {name: np.asarray(values) for name, values in chunk.events.items()}
        units = {name: np.asarray(values) for name, values in chunk.units.items()}
        events = self._with_held(self._held, events, ending)
        units = self._with_held(self._held_units, units, ending)
        names = {int(row["launch"]): row.get("name") for row in chunk.launches}
        names = {launch: name for launch, name in names.items() if isinstance(name, str) and name}
        self._write(chunk, events, units, names)

    @staticmethod
    def _with_held(
        held: list[dict[str, np.ndarray]], columns: dict[str, np.ndarray], ending: set[int]
    ) -> dict[str, np.ndarray]:
        """The rows of launches that end here (with those held before); the rest held."""
        if held:
            columns = {
                name: np.concatenate([*(part[name] for part in held), values])
                for name, values in columns.items()
            }
            held.clear()
        done = np.isin(columns["launch"], list(ending))
        if not done.all():
            held.append({name: values[~done] for name, values in columns.items()})
        return {name: values[done] for name, values in columns.items()}

    def _write(
        self,
        chunk: Chunk,
        events: dict[str, np.ndarray],
        units: dict[str, np.ndarray],
        names: dict[int, Any],
    ) -> None:
        if not len(events["launch"]):
            return
        order = np.lexsort(
            (-events["end_ns"], events["begin_ns"], events["warp"], events["cta"], events["launch"])
        )
        finished = units["finished"].astype(bool)
        ctas = _cta_times(
            units["launch"][finished],
            units["cta"][finished],
            units["start_ns"][finished],
            units["end_ns"][finished],
        )
        lines = proton_rows(
            events["launch"][order], events["cta"][order], events["warp"][order],
            events["begin_ns"][order], events["end_ns"][order],
        )  # fmt: skip
        rows = []
        for i, line in zip(order.tolist(), lines, strict=True):
            launch, cta = int(events["launch"][i]), int(events["cta"][i])
            kernel = chunk.kernels[int(events["kernel"][i])]
            begin, end = int(events["begin_ns"][i]), int(events["end_ns"][i])
            init, post_final = ctas.get((launch, cta), (0, 0))
            host = chunk.host_paths.get(launch, ())
            rows.append(
                {
                    "name": chunk.scopes[int(events["scope"][i])],
                    "cat": kernel,
                    "ph": "X",
                    "ts": int(events["begin_rel_ns"][i]) / 1000,
                    "dur": (end - begin) / 1000,
                    "pid": f"{kernel} Core{int(events['sm'][i])} CTA{cta}",
                    "tid": f"warp {int(events['warp'][i])} (line {line})",
                    "args": {
                        "call_stack": [*host, names.get(launch) or kernel],
                        "Init Time (ns)": init,
                        "Post Final Time (ns)": post_final,
                        "Finalization Time (ns)": 0,
                        "launch": launch,
                        "time_unit": TIME_UNIT,
                    },
                }
            )
        text = ",".join(json.dumps(row, separators=(",", ":")) for row in rows)
        self._file.write(((",\n" if self._written else "\n") + text).encode())
        self._written += len(rows)

    def close(self) -> Path:
        self._file.write(b"\n]}\n")
        self._file.close()
        return self.path

    def __enter__(self) -> ProtonChromeWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def proton_rows(
    launch: np.ndarray, cta: np.ndarray, warp: np.ndarray, begin: np.ndarray, end: np.ndarray
) -> list[int]:
    """The row (Proton's "line") of each event, given in (launch, CTA, warp) groups and by start
    within each: as Proton's trace writer places them, the first row of its warp where it
    overlaps no event already placed (an overlap: it starts before that event ends and ends
    after that event starts), else a new row."""
    rows: list[int] = []
    group = None
    placed: list[list[tuple[int, int]]] = []  # the current warp's rows: their events
    reach: list[int] = []  # the latest end on each row
    for key, start, stop in zip(
        zip(launch.tolist(), cta.tolist(), warp.tolist(), strict=True),
        begin.tolist(),
        end.tolist(),
        strict=True,
    ):
        if key != group:
            group, placed, reach = key, [], []
        for row, latest in enumerate(reach):
            # Events start in order, so only an empty event at another's start fits a row that
            # reaches past its start (the latest events, the likeliest to overlap, checked first).
            if start >= latest or all(not (start < e and stop > b) for b, e in reversed(placed[row])):
                break
        else:
            row = len(placed)
            placed.append([])
            reach.append(stop)
        placed[row].append((start, stop))
        reach[row] = max(reach[row], stop)
        rows.append(row)
    return rows


def _cta_times(
    launch: np.ndarray, cta: np.ndarray, start: np.ndarray, end: np.ndarray
) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (launch, CTA): its first unit's start and its last unit's end, in ns from the
    launch's first start (Proton's Init Time and Post Final Time)."""
    frame = pd.DataFrame({"launch": launch, "cta": cta, "start": start, "end": end})
    first = frame.groupby("launch")["start"].transform("min")
    frame["start"], frame["end"] = frame["start"] - first, frame["end"] - first
    per = frame.groupby(["launch", "cta"]).agg(start=("start", "min"), end=("end", "max"))
    return {
        (int(n), int(c)): (int(a), int(b))
        for (n, c), a, b in zip(per.index, per["start"], per["end"], strict=True)
    }
