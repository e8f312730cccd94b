"""CUDA graphs: captures that never break, and every replay recorded.

While ``torch.cuda.CUDAGraph`` captures, the drains are paused (a capture in torch's default
"global" mode fails if another thread synchronizes), and each instrumented launch writes into a
buffer of its own in the graph's private pool (``hooks.LaunchRecorder.allocate``): the graph
bakes that address in, so a replay can never write into memory that has been handed on. After
each ``replay()``, the recorder copies those buffers into pool chunks on the replaying stream
(ordered after the replay, before anything the user enqueues next) and queues them as launches
that carry the graph's number and the replay's index.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from proton_ik.runtime.hooks import CapturedLaunch, LaunchRecorder
from proton_ik.runtime.queued_launch import QueuedLaunch

_ATTRIBUTE = "_proton_ik_captured"


@dataclass
class CapturedGraph:
    number: int
    launches: list[CapturedLaunch] = field(default_factory=list)
    replays: int = 0


class GraphFollower:
    """Wraps ``torch.cuda.CUDAGraph``'s capture and replay while a session runs."""

    _METHODS = ("capture_begin", "capture_end", "replay")

    def __init__(self, recorder: LaunchRecorder):
        import torch

        self._torch = torch
        self.recorder = recorder
        self._numbers = itertools.count()
        self._capturing = threading.local()
        self._saved: dict[str, Any] = {}

    def install(self) -> None:
        graph_class = self._torch.cuda.CUDAGraph
        follower = self
        originals = {name: getattr(graph_class, name) for name in self._METHODS}
        self._saved = {name: graph_class.__dict__.get(name) for name in self._METHODS}

        def capture_begin(graph, *args, **kwargs):
            follower._begin(graph)
            try:
                return originals["capture_begin"](graph, *args, **kwargs)
            except BaseException:
                follower._end()
                raise

        def capture_end(graph, *args, **kwargs):
            try:
                return originals["capture_end"](graph, *args, **kwargs)
            finally:
                follower._end()

        def replay(graph, *args, **kwargs):
            result = originals["replay"](graph, *args, **kwargs)
            follower._replayed(graph)
            return result

        for name, wrapper in (
            ("capture_begin", capture_begin),
            ("capture_end", capture_end),
            ("replay", replay),
        ):
            setattr(graph_class, name, wrapper)
        self.recorder.on_captured = self._captured

    def uninstall(self) -> None:
        graph_class = self._torch.cuda.CUDAGraph
        for name, original in self._saved.items():
            if original is None:
                delattr(graph_class, name)
            else:
                setattr(graph_class, name, original)
        self._saved = {}
        self.recorder.on_captured = None

    def _begin(self, graph) -> None:
        for drain in self.recorder.drains.values():
            drain.pause()
        captured = CapturedGraph(next(self._numbers))
        setattr(graph, _ATTRIBUTE, captured)
        self._capturing.graph = captured

    def _end(self) -> None:
        self._capturing.graph = None
        for drain in self.recorder.drains.values():
            drain.resume()

    def _captured(self, launch: CapturedLaunch) -> bool:
        graph = getattr(self._capturing, "graph", None)
        if graph is None:
            return False
        graph.launches.append(launch)
        return True

    def _replayed(self, graph) -> None:
        captured: CapturedGraph | None = getattr(graph, _ATTRIBUTE, None)
        recorder = self.recorder
        if captured is None or not captured.launches:
            return
        replay = captured.replays
        captured.replays += 1
        if not recorder.recording:
            return
        torch = self._torch
        stream = torch.cuda.current_stream()
        for launch in captured.launches:
            drain = recorder.drain_for(launch.device)
            size = launch.buffer.numel()
            chunk = drain.allocate(size)
            # On the replaying stream: after this replay's kernels, before the next replay.
            drain.arena[chunk.offset : chunk.offset + size].copy_(launch.buffer, non_blocking=True)
            extra = {**(launch.extra or {}), "graph": captured.number, "replay": replay}
            number = recorder.next_launch()
            queued = QueuedLaunch(
                chunk, number, launch.kernel, launch.num_ctas, launch.stream, launch.device, extra
            )
            drain.submit(queued, stream.cuda_stream)
