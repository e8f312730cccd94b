"""Profiling modes: what the instrumented kernel records, as a frozen dataclass whose ``str``
round-trips through ``Mode.parse``.

The string, behind the fingerprint of the code that lowers it, is also the value of
``triton.knobs.compilation.instrumentation_mode``, which is part of Triton's cache key: kernels
compiled under different modes never mix, and none compiled by an earlier proton_ik is reused
(Triton's key covers Triton's own code, not the stage hook's).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from proton_ik.contract.layout import READ_VERSIONS, VERSION, Granularity, min_capacity
from proton_ik.contract.sampling import MAX_CTA_ID, MAX_LISTED_CTAS, MAX_UNIT_ID
from proton_ik.proton_modes import Default, proton_mode

__all__ = ["AUTO", "DEFAULT_RING_CAPACITY", "Default", "Mode"]

PREFIX = "proton_ik"
AUTO: Final = "auto"  # capacity=auto: each unit's segment is sized from the kernel's code
DEFAULT_RING_CAPACITY = 512  # entries per unit where capacity=auto finds no bound in the code
MAX_CAPACITY = 1 << 24

_SWITCHES = {"on": True, "off": False}
OCCUPANCY = ("free", "keep")
UNSCOPED = ("plain", "kernel")  # what a kernel with no scope of its own records
_UNSCOPED_HELP = (
    "use unscoped=kernel to record one scope per warp, named after the kernel, in every kernel "
    "that has no scope of its own (Inductor's, a library's), or unscoped=plain (the default) to "
    "leave those kernels plain"
)
_LAYOUT_HELP = (
    "use layout=auto (the default: chosen per kernel), layout=2 (16-byte entries) or layout=3 "
    "(8-byte slots, a short scope pair in one)"
)
_CTAS_HELP = (
    "use ctas=N for every N-th CTA by linear id (ctas=4: CTAs 0, 4, 8, ...) or list them with "
    "commas (ctas=0,5,9; one CTA: ctas=5,)"
)


def _capacity_value(value: str) -> int | str:
    if value == AUTO:
        return AUTO
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"capacity={value!r}: use capacity=auto (sized from the kernel's code) or a power of "
            "two, e.g. capacity=512"
        ) from None


def _ids(value: str, key: str, help_text: str) -> tuple[int, ...]:
    parts = value.split(",")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()  # "ctas=5," is the list of one CTA
    try:
        return tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError(f"{key}={value!r}: {help_text}") from None


def _ctas_value(value: str) -> int | tuple[int, ...]:
    if "," in value:
        return _ids(value, "ctas", _CTAS_HELP)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"ctas={value!r}: {_CTAS_HELP}") from None


def _option_value(key: str, value: str) -> object:
    if key == "capacity":
        return _capacity_value(value)
    if key == "ctas":
        return _ctas_value(value)
    if key == "warps":
        return _ids(value, "warps", "list warp ids with commas, e.g. warps=0,4")
    if key == "occupancy" and value not in OCCUPANCY:
        raise ValueError(f"occupancy={value!r}: use occupancy=free or occupancy=keep")
    if key == "unscoped" and value not in UNSCOPED:
        raise ValueError(f"unscoped={value!r}: {_UNSCOPED_HELP}")
    if key == "layout":
        if value != AUTO and value not in tuple(map(str, READ_VERSIONS)):
            raise ValueError(f"layout={value!r}: {_LAYOUT_HELP}")
        return value if value == AUTO else int(value)
    if key in ("pairs", "aggregate", "stage"):
        if value not in _SWITCHES:
            raise ValueError(f"{key}={value!r}: use {key}=on or {key}=off")
        return _SWITCHES[value]
    return value


def _is_capacity(entries: int) -> bool:
    return 1 <= entries <= MAX_CAPACITY and not entries & (entries - 1)


@dataclass(frozen=True)
class Mode:
    """One instrumentation configuration.

    ``instrumentation:granularity=warp:capacity=auto:pairs=on`` is the default.
    ``capacity`` is ring slots per unit. A slot holds one record, or both records of a scope
    whose begin and end sit in straight-line code (``pairs=on``; see ``layout`` for the slot's
    size and a long pair's second slot). ``auto`` sizes each
    kernel's segments from its code: the most slots a unit can write, rounded up to a power of
    two, or a ring of ``DEFAULT_RING_CAPACITY`` slots where the code gives no bound (a scope in
    a loop whose trip count is known only at run time). A number ``N`` is a ring of ``N``
    slots. When a unit writes more than its ring holds, the ring keeps the newest slots and the
    trace reports exactly how many records were overwritten.

    ``layout``: the buffer layout each kernel writes (``contract.layout``). ``2``: 16-byte
    entries. ``3``: 8-byte slots, a pair in one where its duration is under 2**18 cycles (about
    130 us) and in two otherwise, a single record in one; at least 2 slots per unit. Half the
    bytes, but four more instructions and a branch at each pair's end. ``auto`` (the default):
    3 for a kernel that records inside a loop that moves global memory and issues no
    tensor-core instruction (where the bytes cost), 2 elsewhere (docs/PERFORMANCE.md, issue 28).

    ``aggregate=on`` keeps no records: per scope and unit, the kernel adds up the count, sum,
    min, max and a log2 histogram of durations in cycles, in a buffer whose size depends on the
    scope count alone, never on trip counts. An end pairs with the latest begin of its scope in
    the unit that no end has closed yet; an end with none open is not counted. It has no ring,
    so it takes no capacity, and no pairs=off.

    Sampling: ``ctas=N`` records every N-th CTA by linear id (``x + y * nx + z * nx * ny``),
    ``ctas=0,5,9`` the CTAs listed (one CTA: ``ctas=5,``), and ``warps=0,4`` the units of the
    warps listed: with ``granularity=warp`` those warps, with a granularity of several warps
    (``warp_2``, ``warpgroup``, ``warpgroup_2``, ...) the units that begin with them (so each is a
    multiple of the unit's warps: 4 for ``warpgroup``), never with ``granularity=cta``
    (one unit per CTA: sample CTAs instead). Other CTAs and units write nothing and take no
    room in what is copied and stored (``contract.sampling``). Not with aggregate=on yet.

    ``occupancy=keep`` (the default) caps the instrumented kernel's registers (``.maxnreg``) at
    the most that keep the plain kernel's resident CTAs per SM, from one more ``ptxas`` run of
    the plain PTX at compile time; ptxas spills what does not fit. ``occupancy=free`` sets no
    cap (a kernel may lose a resident CTA per SM to the records' registers).

    ``stage=on`` (the default): in a kernel whose code lets a unit write at most 8 entries, all of
    them scope pairs, each unit stores them into 128 bytes of shared memory and copies them to
    the buffer once, at its exit (``lowering.staging``), on sm_90 and later, where the kernel's
    shared memory leaves room without costing a resident CTA. ``stage=off`` stores every entry
    straight to the buffer. The buffer's bytes are the same.

    ``unscoped=kernel``: a kernel with no scope, event or mark of its own (Inductor's generated
    kernels, a library's) records one scope per unit, named after the kernel, from the unit's
    start to its exit (``lowering.kernel_scope``). ``unscoped=plain`` (the default) compiles
    such kernels plain.
    """

    granularity: Granularity = Granularity.WARP
    capacity: int | Literal["auto"] = AUTO
    pairs: bool = True  # a begin and its end in straight-line code share one store at the end
    aggregate: bool = False  # per-scope statistics per unit instead of a trace of records
    ctas: int | tuple[int, ...] = 1  # a stride over linear CTA ids, or the CTAs that record
    warps: tuple[int, ...] = ()  # the warps whose units record; all when empty
    occupancy: Literal["free", "keep"] = "keep"  # issue 28: it won the suite (docs/PERFORMANCE.md)
    stage: bool = True  # a short kernel's pairs staged in shared memory, copied at the exit
    unscoped: Literal["plain", "kernel"] = "plain"  # kernels with no scope: plain, or one scope
    layout: int | Literal["auto"] = AUTO  # the buffer layout version written: 2, 3, or per kernel

    def __post_init__(self) -> None:
        object.__setattr__(self, "granularity", Granularity(self.granularity))
        self._check_sampling()
        if self.occupancy not in OCCUPANCY:
            raise ValueError(f"occupancy={self.occupancy!r}: use occupancy=free or occupancy=keep")
        if self.unscoped not in UNSCOPED:
            raise ValueError(f"unscoped={self.unscoped!r}: {_UNSCOPED_HELP}")
        if self.layout != AUTO and (isinstance(self.layout, bool) or self.layout not in READ_VERSIONS):
            raise ValueError(f"layout={self.layout!r}: {_LAYOUT_HELP}")
        if self.aggregate and (self.capacity != AUTO or not self.pairs):
            option = f"capacity={self.capacity}" if self.capacity != AUTO else "pairs=off"
            raise ValueError(
                f"{option} has no meaning with aggregate=on: each unit keeps a fixed-size table of "
                "per-scope statistics, not a ring of records; drop that option, or use aggregate=off"
            )
        if self.capacity == AUTO:
            return
        capacity = self.capacity
        least = min_capacity(VERSION if self.layout == AUTO else self.layout)
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, int)
            or not _is_capacity(capacity)
            or capacity < least
        ):
            raise ValueError(
                f"capacity={capacity}: ring slots per unit must be a power of two between {least} and "
                f"{MAX_CAPACITY}, e.g. capacity=512, or capacity=auto to size them from the kernel's code"
            )

    def _check_sampling(self) -> None:
        ctas = self.ctas
        if isinstance(ctas, (list, tuple)):
            ctas = tuple(sorted(ctas))
            object.__setattr__(self, "ctas", ctas)
            _check_ids(ctas, "ctas", MAX_CTA_ID, "a linear CTA id")
            if not ctas or len(ctas) > MAX_LISTED_CTAS:
                raise ValueError(
                    f"ctas= lists {len(ctas)} CTAs: list 1 to {MAX_LISTED_CTAS} (each costs a compare in "
                    "every thread's prologue), or use a stride, ctas=N"
                )
        elif isinstance(ctas, bool) or not isinstance(ctas, int) or not 1 <= ctas <= MAX_CTA_ID:
            raise ValueError(f"ctas={ctas!r}: {_CTAS_HELP}")
        warps = tuple(sorted(self.warps))
        object.__setattr__(self, "warps", warps)
        _check_ids(warps, "warps", MAX_UNIT_ID, "a warp id within the CTA")
        if warps and self.granularity is Granularity.CTA:
            raise ValueError(
                f"warps={_ids_text(warps)} has no meaning with granularity=cta, whose one unit is the "
                "whole CTA: drop warps=, sample CTAs with ctas=, or use granularity=warp"
            )
        per_unit = self.granularity.fixed_warps or 1
        if per_unit > 1 and any(w % per_unit for w in warps):
            first = sorted({w - w % per_unit for w in warps})
            unit = "a warpgroup" if self.granularity is Granularity.WARPGROUP else "a unit"
            raise ValueError(
                f"warps={_ids_text(warps)} with granularity={self.granularity.value}: {unit} is named "
                f"by its first warp (0, {per_unit}, {2 * per_unit}, ...); use warps={_ids_text(tuple(first))}"
            )
        if self.aggregate and self.sampled:
            raise ValueError(
                "ctas= and warps= are not supported with aggregate=on yet: drop them, or use aggregate=off"
            )

    @property
    def sampled(self) -> bool:
        """Whether only some CTAs or units record."""
        return self.ctas != 1 or bool(self.warps)

    def __str__(self) -> str:
        pairs = "on" if self.pairs else "off"
        text = f"instrumentation:granularity={self.granularity.value}:capacity={self.capacity}:pairs={pairs}"
        # Only what is not the default: the strings (and Triton's cache keys) of earlier modes
        # stay as they were.
        if self.aggregate:
            text += ":aggregate=on"
        if isinstance(self.ctas, tuple):  # a list of one CTA ends in a comma: not a stride
            text += f":ctas={_ids_text(self.ctas)}" + "," * (len(self.ctas) == 1)
        elif self.ctas != 1:
            text += f":ctas={self.ctas}"
        if self.warps:
            text += f":warps={_ids_text(self.warps)}"
        if self.occupancy != "keep":
            text += f":occupancy={self.occupancy}"
        if not self.stage:
            text += ":stage=off"
        if self.unscoped != "plain":
            text += f":unscoped={self.unscoped}"
        if self.layout != AUTO:
            text += f":layout={self.layout}"
        return text

    @property
    def knob(self) -> str:
        """The value for ``knobs.compilation.instrumentation_mode``."""
        return f"{PREFIX}@{code_fingerprint()}:{self}"

    @classmethod
    def parse(cls, text: object) -> Mode:
        """A mode from its string, a ``Mode``, None (the default), or one of Triton Proton's
        instrumentation modes (``"default:..."`` or ``proton_ik.mode.Default(...)``)."""
        if isinstance(text, Mode):
            return text
        if text is None or text == "":
            return cls()
        proton = proton_mode(text)
        if proton is not None:
            return cls(**proton.mode_options())
        if not isinstance(text, str):
            raise ValueError(
                f"mode={text!r}: a mode is a string such as 'instrumentation:capacity=auto', a "
                "proton_ik.Mode, or Proton's proton_ik.mode.Default(...)"
            )
        parts = text.split(":")
        if parts[0] == PREFIX:
            parts = parts[1:]
        if not parts or parts[0] != "instrumentation":
            raise ValueError(
                f"unknown mode {text!r}: proton_ik has one mode, 'instrumentation', with options "
                "like 'instrumentation:granularity=warp:capacity=auto' (Proton's 'default:...' "
                "modes are accepted too)"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, object] = {}
        for option in parts[1:]:
            key, sep, value = option.partition("=")
            if not sep or key not in fields:
                raise ValueError(
                    f"bad mode option {option!r} in {text!r}; known options: {', '.join(fields)}"
                )
            if key == "granularity" and value not in {g.value for g in Granularity}:
                raise ValueError(
                    f"granularity={value!r} in {text!r}: choose from "
                    f"{', '.join(g.value for g in Granularity)}"
                )
            values[key] = _option_value(key, value)
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValueError as error:
            raise ValueError(f"bad mode {text!r}: {error}") from None

    @classmethod
    def from_knob(cls, knob: str) -> Mode | None:
        """The mode a Triton instrumentation_mode string stands for, or None if it is not ours."""
        head, _, mode = (knob or "").partition(":")
        if head != PREFIX and not head.startswith(PREFIX + "@"):
            return None
        return cls.parse(mode)


# The packages whose code decides an instrumented binary: all of proton_ik but the viewer, which
# only reads what the binary wrote.
_FINGERPRINTED = ("proton_ik", "proton_ik.dialect", "proton_ik.lowering")


def fingerprinted_files() -> dict[str, Path]:
    """Every module the code fingerprint covers, as ``proton_ik/lowering/bound.py`` -> its file.

    Each package is read where the import system finds it (the repository's top level in a
    checkout, under proton_ik/ in a wheel) and its modules are named by import path, so that a
    checkout and a wheel of the same code have the same fingerprint."""
    files: dict[str, Path] = {}
    for package in _FINGERPRINTED:
        spec = importlib.util.find_spec(package)
        folders = (spec.submodule_search_locations if spec else None) or []
        prefix = package.replace(".", "/")
        for folder in folders:
            for path in Path(folder).rglob("*.py"):
                files[f"{prefix}/{path.relative_to(folder).as_posix()}"] = path
    return {name: path for name, path in files.items() if not name.startswith("proton_ik/viewer/")}


def fingerprint(files: dict[str, Path]) -> str:
    """A hash of the files' names and contents."""
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def code_fingerprint() -> str:
    """A hash of the package's code outside the viewer: what decides the instrumented binary."""
    return fingerprint(fingerprinted_files())


def _ids_text(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids))


def _check_ids(ids: tuple[int, ...], key: str, high: int, what: str) -> None:
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= high for i in ids):
        raise ValueError(f"{key}={_ids_text(ids)}: each must be {what} from 0 to {high}")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"{key}={_ids_text(ids)} lists {_ids_text(tuple(twice))} more than once")
