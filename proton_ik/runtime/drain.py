"""Asynchronous drain: records stay on the device until the pool needs room, then only what was
written crosses to the host, with no synchronization of the user's streams.

One ``Drain`` per device owns a device arena of ``pool_bytes``, handed out as a ring
(``RingPool``), a side stream and a pinned host mirror of the arena (allocated once: pinning
per launch costs milliseconds). The launch-exit hook only queues the launch, and records an
event on its stream after every few launches (``LAUNCHES_PER_EVENT``; ``seal`` records the
rest). A background thread copies launches off the device, oldest first, when the pool is half
full, when an allocation waits for room, or when the session flushes (finalize, a graph
capture). How a launch is copied depends on its segments:

- **dense** (each unit's segment is sized from the code's bound, so the chunk is at most twice
  what was written; or an aggregate launch, whose segments hold per-scope statistics, every
  byte of which counts): one copy of the whole chunk, and one for launches whose chunks lie
  one after another;
- **ring** (the bound is unknown): first the units' slot counts, then the CTA headers, unit
  headers and, per unit, only the ring slots below the largest count. The host keeps each
  unit's written slots: the session file's trimmed form (``contract.trimmed``).

A launch that samples CTAs (``contract.sampling``) writes only its first CTA regions, and only
those are copied (``held_ctas``).

A writer thread puts each copied launch into the session file while the drain thread copies the
next one off the device, so that the copy, the file's checksum and its write overlap. Launches
waiting in numbers go in batches: several whole-chunk copies before one wait for the side
stream, several launches written before one flush of the file (``write_batches``). Neither
device nor host memory grows with the number of launches; both are freed at ``close``.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from proton_ik.contract.sampling import held_ctas
from proton_ik.runtime import compiled
from proton_ik.runtime.arena_copies import clear_headers, copy_written
from proton_ik.runtime.pool import PoolChunk, make_ring
from proton_ik.runtime.queued_launch import CopiedLaunch, QueuedLaunch, copied_whole
from proton_ik.runtime.write_batches import next_batch

# Launches to write, each as meta, bytes, and whether the bytes are already trimmed (headers and
# written slots only); the sink returns once they are in the file and flushed.
Sink = Callable[[list[tuple[dict[str, Any], np.ndarray, bool]]], None]

DRAIN_AT = 0.5  # start copying launches off the device once the pool is this full
EVENTS_AT_START = 256  # made with the drain, so that the launches of a loop find one ready
# One event for this many launches of a stream: a launch is done once an event recorded after it
# on its stream is, so the launches between two events share the later one.
LAUNCHES_PER_EVENT = 8
COPY_BATCH_BYTES = 8 << 20  # whole-chunk launches copied before one wait for the side stream


class Drain:
    def __init__(self, device: int, pool_bytes: int, sink: Sink):
        import torch

        self._torch = torch
        self.device = device
        self.pool = make_ring(pool_bytes)
        # Headers start as zeros and every drained launch's are cleared
        # (``arena_copies.clear_headers``): the kernels write them only at each unit's exit, so a
        # unit that never got there must find no earlier launch's counts or end marker.
        self.arena = torch.zeros(self.pool.capacity, dtype=torch.uint8, device=device)
        self.base = self.arena.data_ptr()
        self.side_stream = torch.cuda.Stream(device=device)
        self.host_arena = torch.empty(self.pool.capacity, dtype=torch.uint8, pin_memory=True)
        self._host_bytes = self.host_arena.numpy()
        self.sink = sink
        self.copied_bytes = 0  # device-to-host bytes of records, for the benchmarks
        # How long the user's threads waited for room in a full pool, and how often.
        self.waits = 0
        self.waited_seconds = 0.0
        self._streams: dict[int, Any] = {}
        # Events to record after launches, made now and recycled once their launch is drained:
        # making one costs microseconds, and its first record creates the CUDA event.
        self._record_event = torch._C._CudaEventBase.record  # the method, without its wrapper
        self._free_events: list[Any] = []
        with torch.cuda.stream(self.side_stream):
            for _ in range(EVENTS_AT_START):
                event = torch.cuda.Event()
                event.record()
                self._free_events.append(event)
        self._drain_at = DRAIN_AT * self.pool.capacity
        # Per stream handle, the launches since its last event. Events are recorded only on the
        # user's threads (a drain thread's record could land inside a capture the user began).
        self._unevented: dict[int, list[QueuedLaunch]] = {}
        self._sealing = threading.Lock()
        # Launches are appended by the launching threads without a lock (a deque's append is
        # atomic): a lock the drain thread also takes would make each launch wait for it.
        self._waiting: collections.deque[QueuedLaunch] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._flush_upto = 0  # drain until this many launches have been taken since start
        self._taken = 0
        self._room_wanted = False
        self._paused = False
        self._busy = 0  # launches taken off the queue and not yet done
        self._idle = False  # the drain thread waits for work: a launch past the mark wakes it
        self._closing = False
        self._error: BaseException | None = None
        # Copied launches go to a writer thread, so that a launch's bytes reach the file (a
        # checksum and a write, both outside the GIL) while the next launch crosses from the
        # device. A launch's chunk, and so its window of the host mirror, is given back only
        # once it is written: the ring cannot hand that window to a later launch before.
        self._to_write: queue.SimpleQueue[CopiedLaunch | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"proton_ik-drain-{device}", daemon=True)
        self._writer = threading.Thread(target=self._write, name=f"proton_ik-writer-{device}", daemon=True)
        self.route = self._route()
        self._thread.start()
        self._writer.start()

    def _route(self) -> Any:
        """What the compiled launch path needs to queue a launch here as ``submit`` does; None
        where launches take the Python path."""
        built = compiled.launch_path()
        if built is None or not isinstance(self.pool, built.Ring):
            return None
        return built.Route(
            drain=self,
            ring=self.pool,
            base=self.base,
            device=self.device,
            unevented=self._unevented,
            sealing=self._sealing,
            waiting=self._waiting,
            drain_at=self._drain_at,
            per_event=LAUNCHES_PER_EVENT,
        )

    # --- the user's thread -----------------------------------------------------------------
    def allocate(self, size: int) -> PoolChunk:
        """A chunk of the arena; while the pool is full, wait for the oldest launch to leave."""
        return self.pool.allocate(size, self._wait_for_room)  # PoolTooSmall for a launch too large

    def _wait_for_room(self) -> bool:
        """Have the drain thread take the oldest launch, and wait for it; False if none is queued."""
        self.seal()
        with self._cond:
            if not self._waiting and not self._busy:
                return False
            self._room_wanted = True
            self._cond.notify_all()
            began = time.perf_counter()
            self._cond.wait_for(self._took_one_after(self._taken))
            self.waited_seconds += time.perf_counter() - began
            self.waits += 1
        self.raise_if_failed()
        return True

    def _event(self):
        """An event to record after a launch: making one costs microseconds."""
        try:
            return self._free_events.pop()
        except IndexError:
            return self._torch.cuda.Event()

    def submit(self, launch: QueuedLaunch, stream: int) -> None:
        """Queue a launch just enqueued on ``stream``; it stays on the device for now. It gets an
        event of its own (shared with the stream's launches since the last one) when it is the
        stream's ``LAUNCHES_PER_EVENT``-th since then, when the pool is past the drain mark, or
        when it is not recorded (its chunk goes back as soon as it is done); the others wait for
        the next event on their stream, or for ``seal``. (The compiled launch path does the same
        for a recorded launch, through ``route``.)"""
        with self._sealing:
            unevented = self._unevented.get(stream)
            if unevented is None:
                unevented = self._unevented[stream] = []
            unevented.append(launch)
            if (
                len(unevented) >= LAUNCHES_PER_EVENT
                or launch.number is None
                or self.pool.used >= self._drain_at
            ):
                self._seal_stream(stream, unevented)
        self._waiting.append(launch)
        if self._idle and (launch.number is None or self.pool.used >= self._drain_at):
            self.wake()

    def wake(self) -> None:
        """Wake the idle drain thread for launches past the drain mark. (A drain thread about to
        wait may miss this: the next launch, a flush or an allocation waiting for room wakes it
        then.)"""
        with self._cond:
            self._cond.notify_all()

    def seal(self) -> None:
        """Record an event on every stream after its last launch, on this (a user's) thread: the
        drain can then take every launch queued so far."""
        with self._sealing:
            for stream, unevented in self._unevented.items():
                if unevented:
                    self._seal_stream(stream, unevented)

    def _seal_stream(self, stream: int, unevented: list[QueuedLaunch]) -> None:
        """One event after the launches of ``stream`` since its last one (under ``_sealing``)."""
        event = self._event()
        self._record_event(event, self.stream(stream))
        for launch in unevented:
            launch.launched = event
        unevented[-1].owns_event = True
        unevented.clear()

    def _queued(self) -> int:
        """Launches submitted so far (under ``_cond``): taken, being taken, or waiting."""
        return self._taken + self._busy + len(self._waiting)

    def _took_one_after(self, taken: int) -> Callable[[], bool]:
        return lambda: self._taken > taken or self._error is not None

    def stream(self, handle: int):
        """The torch stream for a CUstream handle. Handle 0 is the legacy default stream: an
        ExternalStream of 0 would not order an event after work already queued there."""
        stream = self._streams.get(handle)
        if stream is None:
            torch = self._torch
            if handle == 0:
                stream = torch.cuda.default_stream(self.device)
            else:
                stream = torch.cuda.ExternalStream(handle, device=self.device)
            self._streams[handle] = stream
        return stream

    def flush(self) -> None:
        """Copy every queued launch off the device and wait for it."""
        self.seal()
        with self._cond:
            self._flush_upto = self._queued()
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._taken >= self._flush_upto or self._error is not None)
        self.raise_if_failed()

    def flush_soon(self) -> None:
        """Have the drain thread copy every launch queued so far off the device, without waiting."""
        self.seal()
        with self._cond:
            self._flush_upto = max(self._flush_upto, self._queued())
            self._cond.notify_all()

    def pause(self) -> None:
        """Flush, then make no CUDA call until ``resume``: a graph capture in global mode
        fails if another thread synchronizes while it runs."""
        self.flush()
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: not self._busy)

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._writer.join()
        self.route = None  # it refers back to this drain
        # Freed now, not when the collector breaks the session's cycles: a pool per window otherwise.
        del self.arena, self.host_arena, self._host_bytes

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"proton_ik: draining profile buffers failed: {self._error}") from self._error

    # --- the drain thread ------------------------------------------------------------------
    def _should_take(self) -> bool:
        if self._paused or not self._waiting or self._waiting[0].launched is None:
            return False  # (a launch with no event yet: the next one on its stream, or a seal, records it)
        return (
            self._taken < self._flush_upto
            or self._room_wanted
            or self.pool.used >= self._drain_at
            or self._waiting[0].number is None
        )

    def _run(self) -> None:
        torch = self._torch
        torch.cuda.set_device(self.device)
        while True:
            with self._cond:
                while not self._should_take():
                    if self._closing:
                        self._to_write.put(None)  # nothing left that a flush asked for
                        return
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                batch = [CopiedLaunch(launch) for launch in self._take()]
            try:
                if self._error is None:
                    self._copy_out(batch)
                else:  # nothing more is written: each chunk goes back once its launch is done
                    for copied in batch:
                        copied.launch.launched.synchronize()
            except BaseException as error:  # surfaced to the user at the next allocate or flush
                self._error = error
            finally:
                for copied in batch:
                    self._to_write.put(copied)

    def _take(self) -> list[QueuedLaunch]:
        """The oldest launch, then (under ``_cond``) the launches behind it whose copies may share
        its wait for the side stream: each copied whole, ``COPY_BATCH_BYTES`` in all at most. A
        finalize that drains a thousand short launches then waits once for many, not once each."""
        taken = [self._waiting.popleft()]
        held = taken[0].chunk.size
        while copied_whole(taken[-1]) and self._waiting and self._should_take():
            after = self._waiting[0]
            if not copied_whole(after) or held + after.chunk.size > COPY_BATCH_BYTES:
                break
            taken.append(self._waiting.popleft())
            held += after.chunk.size
        self._busy += len(taken)
        return taken

    def _write(self) -> None:
        """The writer thread: copied launches into the sink, in the order they were taken, as
        many at once as have been copied (``write_batches``); then their chunks go back."""
        ended = False
        while not ended:
            batch, ended = next_batch(self._to_write, lambda copied: copied.nbytes)
            try:
                written = [
                    (c.meta, c.data, c.trimmed) for c in batch if c.meta is not None and c.data is not None
                ]
                if self._error is None and written:
                    self.sink(written)
            except BaseException as error:  # surfaced to the user at the next allocate or flush
                self._error = error
            finally:
                for copied in batch:
                    self.pool.release(copied.launch.chunk)
                    if copied.launch.owns_event:
                        self._free_events.append(copied.launch.launched)
                with self._cond:
                    self._busy -= len(batch)
                    self._taken += len(batch)
                    self._room_wanted = False
                    self._cond.notify_all()

    def _copy_out(self, batch: list[CopiedLaunch]) -> None:
        """Copy a batch (``_take``) to the host: a launch not recorded is only waited for."""
        torch = self._torch
        first = batch[0].launch
        if first.number is None or first.kernel is None:
            first.launched.synchronize()
            return
        with torch.cuda.stream(self.side_stream):
            try:
                waited = None
                for run in self._adjacent_runs(batch):
                    for copied in run:
                        if copied.launch.launched is not waited:  # launches of a stream share an event
                            waited = copied.launch.launched
                            self.side_stream.wait_event(waited)
                    if len(run) == 1:
                        self._copy_one(run[0])
                    else:
                        self._copy_together(run)
            finally:  # the batch's copies are done before any of its chunks can go back
                self.side_stream.synchronize()

    def _adjacent_runs(self, batch: list[CopiedLaunch]) -> list[list[CopiedLaunch]]:
        """The batch in runs of launches copied whole whose chunks lie one after another in the
        arena, with nothing between them (less than the pool's alignment: their rounding)."""
        runs: list[list[CopiedLaunch]] = []
        end = None
        for copied in batch:
            chunk = copied.launch.chunk
            follows = end is not None and 0 <= chunk.offset - end < self.pool.align
            if follows and copied_whole(copied.launch):
                runs[-1].append(copied)
            else:
                runs.append([copied])
            end = chunk.offset + chunk.size if copied_whole(copied.launch) else None
        return runs

    def _copy_together(self, run: list[CopiedLaunch]) -> None:
        """Launches that lie one after another (``_adjacent_runs``): one copy and one clearing of
        their span, where each alone takes a copy and two header clearings (host calls, each)."""
        held = []
        for copied in run:
            layout = copied.launch.kernel.layout  # type: ignore[union-attr]  # copied whole: recorded
            meta, num_ctas = held_ctas(copied.launch.meta(), layout.sampling)
            held.append((meta, copied.launch.chunk.offset, num_ctas * layout.cta_bytes))
        span = slice(held[0][1], held[-1][1] + held[-1][2])
        self.host_arena[span].copy_(self.arena[span], non_blocking=True)
        self.arena[span].zero_()  # the headers and the slots: all of it is these launches'
        for copied, (meta, offset, size) in zip(run, held, strict=True):
            copied.meta, copied.data, copied.trimmed = meta, self._host_bytes[offset : offset + size], False
            self.copied_bytes += size

    def _copy_one(self, copied: CopiedLaunch) -> None:
        """Queue a launch's copy (and its headers' clearing) on the side stream, and say what the
        writer is to write of it."""
        launch = copied.launch
        kernel, chunk = launch.kernel, launch.chunk
        assert kernel is not None
        layout = kernel.layout
        meta, num_ctas = held_ctas(launch.meta(), layout.sampling)
        if copied_whole(launch):
            size = num_ctas * layout.cta_bytes
            window = slice(chunk.offset, chunk.offset + size)
            self.host_arena[window].copy_(self.arena[window], non_blocking=True)
            clear_headers(self.arena, chunk.offset, layout, num_ctas)
            self.copied_bytes += size
            copied.meta, copied.data, copied.trimmed = meta, self._host_bytes[window], False
        else:
            data, size = copy_written(
                self.arena,
                self.host_arena,
                self._host_bytes,
                self.side_stream,
                chunk.offset,
                layout,
                num_ctas,
            )
            self.copied_bytes += size
            copied.meta, copied.data, copied.trimmed = meta, data, True
