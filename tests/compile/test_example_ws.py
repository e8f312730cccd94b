"""examples/gluon_ws_pipeline.py compiles for Hopper (sm_90) with its events, on the CPU.

The example's two partitions run in different warps: the producer's start of ``tma_load`` and
the consumers' end of it must both reach the PTX as event records, each at its own site, with
the slot index read from a register (``index=stage`` is a runtime value)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.tags import RecordKind, make_tag

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import gluon_ws_pipeline
    finally:
        sys.path.remove(str(EXAMPLES))
    return gluon_ws_pipeline


@pytest.fixture(scope="module")
def compiled(example):
    return example.compile_for_hopper()


def test_the_example_compiles_to_a_cubin_with_its_events(example, compiled):
    assert compiled.asm["cubin"] and compiled.metadata.target.arch == 90
    table = {s.name: s for s in KernelMetadata.from_dict(compiled.metadata.proton_ik, "example").scopes}
    assert {name: (s.kind, s.instances) for name, s in table.items()} == {
        "reduce": ("scope", None),
        "tma_load": ("event", example.NUM_STAGES.value),
        "phase": ("mark", None),
        "slot_free": ("event", example.NUM_STAGES.value),
    }


def test_each_event_starts_in_one_partition_and_ends_in_the_other(compiled):
    table = {s.name: s.id for s in KernelMetadata.from_dict(compiled.metadata.proton_ik, "example").scopes}
    ptx = compiled.asm["ptx"]
    tags = [int(t) for t in re.findall(r"or\.b32 \t%pik_ev_tag, %pik_ev_tag, (\d+);", ptx)]
    for name in ("tma_load", "slot_free"):
        start = make_tag(table[name], False, RecordKind.EVENT)
        end = make_tag(table[name], True, RecordKind.EVENT)
        assert tags.count(start) == 1 and tags.count(end) == 1, name
    # slot_free's start and end are predicated (the last slots are never refilled).
    assert len(re.findall(r"setp\.ne\.b32 \t%pik_ev_on", ptx)) == 2
    value = make_tag(table["phase"], False, RecordKind.VALUE)
    # a value mark's record: one store (layout=auto gives this kernel's loops layout 3)
    assert len(re.findall(rf"st\.global\.L2::cache_hint\.v[24]\.b32 \t\[%pik_a\], \{{{value}, ", ptx)) == 1
