"""Session chunks in, Perfetto protobuf trace (``.pftrace``) out.

The track tree (``tracks``: the model both writers draw) lets a kernel author find any SM, CTA
or warp::

    proton_ik: <session>                      sorted by launch
      host scopes                             where launches were made in ``proton_ik.scope``s:
                                              a slice per scope instance, nested, spanning its
                                              launches
      launch 3: matmul_kernel                 one slice, named after the launch (its
                                              ``launch_metadata`` name; "lifetime" if it has
                                              none), whose args are the launch's metadata,
                                              grid, config and totals
        clusters                              where thread-block clusters hold several CTAs:
                                              a slice per cluster, first CTA start to last
                                              CTA end (``clusters``)
        SM 17                                 sorted by SM, then slot (or CTA), then warp
          resident CTAs, scopes in flight     counter tracks
          slot 2                              timeline="slots": a CTA slot; "ctas": "CTA 42"
            warp 4                            per CTA in the slot, a "lifetime" slice with the
                                              warp's scopes nested in it; each slice's args
                                              name its CTA, SM, warp, cycles and kind, and a
                                              scope's its source line: as its interned source
                                              location (file and line) where the kernel's
                                              scope table has its file, as an arg otherwise
            warp 4 overlap 1                  scopes that overlap others without nesting

Streaming: the trace is written chunk by chunk (``tables.Chunk``: a run of launches), and each
chunk is its own packet sequence, with its own interned names and incremental clock, so nothing
of a chunk is kept once it is written. A launch whose pieces span chunks keeps its launch, SM,
slot and warp tracks, its slots' state and its counters' intervals in flight
(``counters``); its launch track is described, and its slice written, with its last
piece. A launch none of whose units left a time gets an empty slice where the launches before it
ended. Host scope instances (a few numbers each, not events) are gathered as launches end and
written last, as their own sequence: an instance is a run of consecutive launches (in launch
order) under the same scope, from its first launch's begin to its last launch's end.

Size: within a sequence, each track gets one header packet that sets the sequence's default
track and restarts an incremental clock (a sequence-scoped clock whose timestamps are deltas,
anchored to BOOTTIME by a clock snapshot), so an event packet holds a small time delta, an
interned name and its debug annotations, with no track uuid. Tracks are written in order of
their first timestamp, which keeps the anchor snapshots monotonic. Packets are bundled and
zlib-compressed (``TracePacket.compressed_packets``), which trace processor and the Perfetto UI
inflate on load.

Speed: the few packets that say what the trace is (interned names, the root and launch tracks,
launch slices) are built with perfetto's protos. The millions of others (SM, counter, slot and
warp tracks, track headers, slice begins and ends, counter points) are encoded column by column
with ``arrays.byterows``, in the canonical field order protobuf itself writes, and compressed on worker
threads while the next chunk is encoded.

Its modules: ``writer`` drives the others, chunk by chunk: ``tracks`` (the track model of
``viewer.tracks``, shared with the Chrome writer and the readers, as uuids and descriptors),
``slices`` (slice packets), ``counters`` (counter points), ``host`` (the host scopes' track),
``events`` (events, marks and values, on async, warp and counter tracks), ``clusters`` (the
clusters tracks), ``wire`` (protobuf encoding), ``packets`` (the event stream's encoding in C,
with ``slices`` and ``arrays.byterows`` its reference) and ``sink`` (bundling and compression). Outside
this package, use what it exports here.
"""

from proton_ik.viewer.perfetto.packets import encoder as event_encoder
from proton_ik.viewer.perfetto.wire import INCREMENTAL_CLOCK_ID, debug_annotation
from proton_ik.viewer.perfetto.writer import (
    MAX_MERGED,
    MAX_PARTS,
    PROGRESS_EVENTS,
    SEQUENCE_ID,
    SEQUENCES_PER_SESSION,
    UUID_BITS,
    PerfettoWriter,
    SharedLaunch,
    first_uuid,
    write_perfetto,
)

__all__ = [
    "INCREMENTAL_CLOCK_ID",
    "MAX_MERGED",
    "MAX_PARTS",
    "PROGRESS_EVENTS",
    "SEQUENCES_PER_SESSION",
    "SEQUENCE_ID",
    "UUID_BITS",
    "PerfettoWriter",
    "SharedLaunch",
    "debug_annotation",
    "event_encoder",
    "first_uuid",
    "write_perfetto",
]
