"""``convert-pikgpu-to-ptx``: splice a ``pikgpu`` module into the kernel's PTX.

PTX registers are mutable, so a unit's record count lives in one register (``registers.COUNT``)
across loops and branches with no SSA plumbing. The pass emits:

- declarations of the ``%pik_*`` registers (``registers``) after the kernel's own;
- the frame (``frame_ptx``): a prologue that stores nothing, and an epilogue that every
  ``ret`` branches to and that writes the unit and CTA headers;
- at each single record (``pikgpu.read_clock`` + ``pikgpu.store_record``): a clock read and one
  store by the unit's writer lane into slot ``count & (capacity - 1)``, which never leaves the
  segment (``slots_ptx``);
- at a paired begin, only a clock read into a register of its own (a begin goes above the pure
  arithmetic before its marker: ``placement``); at its end (``pikgpu.store_pair``), a clock
  read and the store of both records: one 8-byte slot where the duration fits it, two where it
  does not (layout version 3), or one 16-byte entry (version 2);
- in a short kernel of pairs, the pairs' stores go to shared memory instead, and the
  epilogue copies them (``staging``).

In aggregate mode, ``aggregate_to_ptx`` adds its registers, prologue and begin and end sites;
``events_to_ptx`` adds the sites of event records with an index register, of value marks, and
the guards of predicated records.

All offsets come from ``proton_ik.contract.layout``, and so does the order of the operands of
every vector store: each names the layout fields it writes (``stores_ptx.vector``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation

from proton_ik.dialect.pikgpu import (
    AggregateBeginOp,
    AggregateEndOp,
    FinalizeOp,
    ReadClockOp,
    SegmentSetupOp,
    StorePairOp,
    StoreRecordOp,
)
from proton_ik.lowering import (
    aggregate_to_ptx,
    events_to_ptx,
    frame_ptx,
    placement,
    ptx_text,
    registers,
    sampling_ptx,
    slots_ptx,
    staging,
    stores_ptx,
)
from proton_ik.lowering.registers import PAIR_BEGIN

PASS_NAME = "convert-pikgpu-to-ptx"
EXIT_LABEL = frame_ptx.EXIT_LABEL

_REG_DECL = re.compile(r"^\s*\.reg\s")
_RET = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?ret(?:\.uni)?\s*;")


@dataclass
class PtxPlan:
    """What goes where: replacement lines for each marker site, plus the frame around them."""

    declarations: list[str] = field(default_factory=list)
    prologue: list[str] = field(default_factory=list)
    sites: dict[int, list[str]] = field(default_factory=dict)
    epilogue: list[str] = field(default_factory=list)
    begins: set[int] = field(default_factory=set)  # sites of begins: placed by ``placement``
    pair_begins: dict[int, int] = field(default_factory=dict)  # a pair's end site -> its begin site
    module: list[str] = field(default_factory=list)  # module-scope lines, before the entry
    # Lines reached only by a branch (a long pair's form: ``slots_ptx.PairEnd``), placed after
    # the kernel's body and before the epilogue.
    out_of_line: list[str] = field(default_factory=list)


def _single(store: StoreRecordOp, ring: slots_ptx.Ring) -> list[str]:
    return ["\t// pik record", *slots_ptx.single(ring, store.tag.value.data, store.is_end)]


def _pair_begin(pair: int) -> list[str]:
    return ["\t// pik pair begin", f"\tmov.u32 \t{PAIR_BEGIN[pair]}, %clock;"]


def _pair_end(store: StorePairOp, ring: slots_ptx.Ring, pair: int, out_of_line: list[str]) -> list[str]:
    tags = store.begin_tag.value.data, store.end_tag.value.data
    end = slots_ptx.pair_end(ring, *tags, PAIR_BEGIN[pair], _site_of(store))
    out_of_line += end.long_form
    return ["\t// pik pair end", *end.lines]


def plan_ptx(
    module: ModuleOp, scratch_param: str, staged: bool = False, target_sm: int | None = None
) -> PtxPlan:
    """Turn a verified ``pikgpu`` module into PTX fragments keyed by marker site. ``staged``: the
    pairs go through shared memory (``staging``), where every entry is a pair of a trace.
    ``target_sm``: the PTX's ``.target`` (None where it names none: the newest), which decides
    whether the records' stores carry an L2 policy (sm_80 on) and the CTA header its cluster
    (sm_90 on); nothing the target lacks is emitted."""
    ops = list(module.body.block.ops)
    setup = _segment_setup(ops)
    layout = setup.layout
    pairs = [o for o in ops if isinstance(o, StorePairOp)]
    pair_of_begin = {store.begin_clock.owner: index for index, store in enumerate(pairs)}
    staged = staged and bool(pairs) and not layout.aggregate and not any(_is_entry_but_a_pair(o) for o in ops)
    policy = stores_ptx.has_policy(target_sm)
    ring = slots_ptx.Ring(layout.version, frame_ptx.slot_mask(setup), policy)
    plan = PtxPlan(
        prologue=[
            *frame_ptx.prologue(setup, scratch_param, staged, policy),
            *(aggregate_to_ptx.prologue(setup) if layout.aggregate else []),
        ],
        epilogue=frame_ptx.epilogue(setup, scratch_param, staged, frame_ptx.has_clusters(target_sm)),
    )
    pair_ring = dataclasses.replace(ring, staged=True) if staged else ring
    plan.sites = _sites(ops, pair_of_begin, ring, pair_ring, plan.out_of_line)
    events = events_to_ptx.plan_sites(ops, plan.sites, ring)
    plan.declarations = registers.declarations(
        pairs=len(pairs),
        compact_pairs=layout.version >= 3,
        sampled=sampling_ptx.sampled(layout.sampling),
        launch_sized=setup.sized_at_launch,
        aggregate_scopes=layout.aggregate_scopes,
        events=events,
        staged=staged,
    )
    plan.begins = {_site_of(op) for op in ops if _is_begin(op, pair_of_begin)}
    plan.pair_begins = {
        _site_of(op): _site_of(op.begin_clock.owner) for op in ops if isinstance(op, StorePairOp)
    }
    if staged:
        plan.module = staging.shared_array(layout.units)
    return plan


def _segment_setup(ops: list[Operation]) -> SegmentSetupOp:
    setups = [o for o in ops if isinstance(o, SegmentSetupOp)]
    if len(setups) != 1 or not any(isinstance(o, FinalizeOp) for o in ops):
        raise ValueError(f"{PASS_NAME} needs one pikgpu.segment_setup and a pikgpu.finalize")
    return setups[0]


def _site_of(op) -> int:
    if op.site is None:
        raise ValueError(f"{PASS_NAME}: {op.name} without a site: {op}")
    return op.site.value.data


def _sites(
    ops: list[Operation],
    pair_of_begin: dict[Operation | Block, int],
    ring: slots_ptx.Ring,
    pair_ring: slots_ptx.Ring,
    out_of_line: list[str],
) -> dict[int, list[str]]:
    """The lines of each site of a record, a pair or an aggregate scope (``events_to_ptx`` plans
    the rest); the pairs store into ``pair_ring`` (the stage, in a staged kernel), and add
    what they place out of line to ``out_of_line``."""
    sites: dict[int, list[str]] = {}
    for op in ops:
        if isinstance(op, ReadClockOp) and op in pair_of_begin:
            sites[_site_of(op)] = _pair_begin(pair_of_begin[op])
        elif isinstance(op, StorePairOp):
            sites[_site_of(op)] = _pair_end(op, pair_ring, pair_of_begin[op.begin_clock.owner], out_of_line)
        elif isinstance(op, StoreRecordOp):
            if not isinstance(op.clock.owner, ReadClockOp):
                raise ValueError(f"{PASS_NAME}: a record must store a pikgpu.read_clock result")
            sites[_site_of(op)] = _single(op, ring)
        elif isinstance(op, AggregateBeginOp):
            sites[_site_of(op)] = aggregate_to_ptx.begin(op)
        elif isinstance(op, AggregateEndOp):
            sites[_site_of(op)] = aggregate_to_ptx.end(op, _site_of(op))
    return sites


def _is_entry_but_a_pair(op) -> bool:
    """A single record, an event's record or a value mark: an entry that is not a scope pair."""
    return isinstance(op, StoreRecordOp) or events_to_ptx.is_entry(op)


def _is_begin(op, pair_of_begin) -> bool:
    """A scope's begin: a paired begin's clock read, a single begin record, an aggregate begin."""
    if isinstance(op, StoreRecordOp):
        return not op.is_end
    return (isinstance(op, ReadClockOp) and op in pair_of_begin) or isinstance(op, AggregateBeginOp)


def apply_plan(ptx: str, plan: PtxPlan) -> str:
    lines = ptx.splitlines()
    start, end = ptx_text.entry_body(lines)
    outside = [site for site in plan.sites if not start < site < end]
    if outside:
        raise ValueError(f"{PASS_NAME}: record sites {outside} lie outside the kernel's entry function")
    depths = dict(ptx_text.brace_depths(lines, start, end))
    # Only the function's own declarations: inline-asm blocks declare registers of their own.
    last_decl = max(
        (i for i, depth in depths.items() if depth == 1 and _REG_DECL.match(lines[i])), default=start
    )
    # The epilogue goes before the function-end label that debug info uses, inside its range.
    epilogue_at = next((i for i in range(start + 1, end) if lines[i].startswith("$L__func_end")), end)
    movable = {site for site in plan.sites if placement.reads_only_ours(plan.sites[site])}
    # Ends first: where an end and a begin arrive at one line, the end's lines come first.
    moved = {
        site: target
        for site, begin in sorted(plan.pair_begins.items())
        if site in movable
        and placement.in_loop(lines, site, start, end)
        and (target := placement.sunk(lines, site, end, placement.written(lines[begin:site]))) is not None
    }
    moved |= {site: placement.hoisted(lines, site, last_decl) for site in sorted(plan.begins & movable)}
    arriving: dict[int, list[str]] = {}
    for site, target in moved.items():
        arriving.setdefault(target, []).extend(plan.sites[site])
    entry, _ = ptx_text.entry_params(lines)
    out: list[str] = []
    for index, line in enumerate(lines):
        if index == entry:
            out.extend(plan.module)
        if index == epilogue_at:
            if plan.out_of_line:
                # whatever reached the epilogue by falling through still does
                out.extend([f"\tbra \t{EXIT_LABEL};", *plan.out_of_line])
            out.extend(plan.epilogue)
        out.extend(arriving.get(index, ()))
        if index in plan.sites:
            if index not in moved:
                out.extend(plan.sites[index])
            continue
        ret = _RET.match(line) if start < index < end else None
        if ret is not None:
            out.append(f"{ret.group('indent')}{ret.group('guard') or ''}bra \t{EXIT_LABEL};")
            continue
        out.append(line)
        if index == last_decl:
            out.extend(plan.declarations)
            out.extend(plan.prologue)
    return "\n".join(out) + "\n"


def lower_to_ptx(module: ModuleOp, ptx: str, staged: bool = False) -> str:
    """The pass: a ``pikgpu`` module and the PTX it was collected from -> instrumented PTX;
    ``staged``: a short kernel's pairs go through shared memory (``staging``)."""
    _, params = ptx_text.entry_params(ptx.splitlines())
    if not params:
        raise ValueError("the kernel has no parameters; Triton's profile_scratch must be the last one")
    return apply_plan(ptx, plan_ptx(module, params[-1], staged, ptx_text.target_sm(ptx.splitlines())))
