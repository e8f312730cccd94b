"""The kernel metadata: what the lowering writes into a compiled kernel's metadata, and what the
runtime (when the kernel loads) and the viewer (as each launch's ``profile``) read back. One
typed definition, ``KernelMetadata``, for all three::

    "proton_ik": {
      "mode": "instrumentation:granularity=warp:capacity=auto:pairs=on",
      "num_warps": 4,
      "warps_per_unit": 1,
      "layout": {"version": 2, "units": 4, "capacity": 64, "cta_bytes": 4224},
      "capacity": {"entries": 64, "source": "bound", "bound": 48, "reason": "..."},
      "occupancy": {"plain_registers": 72, "plain_ctas": 7, "cap": 72, "reason": "..."},
      "scopes": [{"id": 0, "name": "load", "line": 20, "file": "matmul.py"},
                 {"id": 1, "name": "tma", "line": 31, "kind": "event", "instances": 4}, ...]
    }

Beside it, Triton's own ``profile_scratch_size`` (bytes per CTA) and ``profile_scratch_align``
make its launcher ask our allocator for the buffer. Sessions captured before the capacity was
recorded have no "capacity"; ``from_dict`` reads them. A sampled kernel's layout has a
"sampling" table (``contract.sampling``); only ``occupancy=keep`` writes "occupancy".
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from proton_ik.contract.fields import SchemaError, integer, mapping, plain_table, shown, text
from proton_ik.contract.launch_bound import BoundError, LaunchBound
from proton_ik.contract.launch_bound import parse as parse_launch_bound
from proton_ik.contract.layout import CTA_ALIGN, READ_VERSIONS, BufferLayout
from proton_ik.contract.names import scope_name_problem
from proton_ik.contract.sampling import Sampling
from proton_ik.contract.tags import MAX_EVENT_INSTANCES, MAX_SCOPES

METADATA_KEY = "proton_ik"
SCRATCH_SIZE_KEY = "profile_scratch_size"  # Triton's: bytes of profile_scratch per CTA
SCRATCH_ALIGN_KEY = "profile_scratch_align"  # Triton's: their alignment
MAX_WARPS = 64
MAX_UNITS = 1 << 16
MAX_CAPACITY = 1 << 32
MAX_LINE = 1 << 31

CapacitySource = Literal["bound", "launch", "ring", "option", "aggregate"]


@dataclass(frozen=True)
class Capacity:
    """Entries per unit, and what decided them.

    ``source`` is "bound" (capacity=auto, sized from the code's bound), "launch" (capacity=auto,
    sized at each launch from the kernel's arguments and grid: a compiled kernel's ``entries``
    are the ring a launch gets where the launch path does not pass its arguments, a launch's
    are its own), "ring" (capacity=auto, but the code gives no bound that fits: the default
    ring), "option" (capacity=N) or "aggregate" (aggregate=on: statistics per scope, no ring, 0
    entries)."""

    entries: int
    source: CapacitySource
    bound: int | None
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"entries": self.entries, "source": self.source, "bound": self.bound, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Capacity:
        entries = integer(data, "entries", where, 0, MAX_CAPACITY)
        source = data.get("source")
        if source not in get_args(CapacitySource):
            raise SchemaError(f"{where}: 'source' is {shown(source)}, not one of {get_args(CapacitySource)}")
        bound = integer(data, "bound", where, 0, MAX_CAPACITY, nullable=True)
        return cls(entries, cast(CapacitySource, source), bound, text(data, "reason", where))


NameKind = Literal["scope", "event", "mark"]
NAME_KINDS: tuple[NameKind, ...] = get_args(NameKind)


@dataclass(frozen=True)
class Scope:
    """One row of a kernel's name table: the id its records carry, its name, its first line, and
    what it names: a scope, an event (``pl.event``, with its declared ``instances``) or a mark
    (``pl.mark``, with or without values). Tables from before events list scopes only."""

    id: int
    name: str
    line: int | None
    kind: NameKind = "scope"
    instances: int | None = None  # events only
    file: str | None = None  # its first record's source file (base name); None in older tables

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"id": self.id, "name": self.name, "line": self.line}
        if self.kind != "scope":
            data["kind"] = self.kind
        if self.instances is not None:
            data["instances"] = self.instances
        if self.file is not None:
            data["file"] = self.file
        return data


@dataclass(frozen=True)
class Occupancy:
    """``occupancy=keep``: the plain kernel's registers per thread and resident CTAs per SM, and
    the ``.maxnreg`` cap that keeps them (None where none could be computed; ``reason`` says
    why)."""

    plain_registers: int | None
    plain_ctas: int | None
    cap: int | None
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "plain_registers": self.plain_registers,
            "plain_ctas": self.plain_ctas,
            "cap": self.cap,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Occupancy:
        def count(key: str) -> int | None:
            return integer(data, key, where, 0, MAX_CAPACITY, nullable=True)

        return cls(count("plain_registers"), count("plain_ctas"), count("cap"), text(data, "reason", where))


@dataclass(frozen=True)
class KernelMetadata:
    """An instrumented kernel: its buffer layout, its scope table, the mode it was compiled under
    and what decided its capacity (None in sessions from before it was recorded)."""

    layout: BufferLayout
    scopes: tuple[Scope, ...] = ()
    warps_per_unit: int = 1
    num_warps: int | None = None
    mode: str | None = None
    capacity: Capacity | None = None
    occupancy: Occupancy | None = None  # occupancy=keep only
    launch_bound: LaunchBound | None = None  # capacity "launch": what each launch evaluates

    @property
    def sized_from_bound(self) -> bool:
        """Segments sized from the code's bound, at compile time or at the launch: a launch's
        buffer is at most twice what it wrote."""
        return self.capacity is not None and self.capacity.source in ("bound", "launch")

    @property
    def sized_at_launch(self) -> bool:
        """The kernel reads its capacity from its buffer pointer (``contract.layout``)."""
        return self.launch_bound is not None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.mode is not None:
            data["mode"] = self.mode
        if self.num_warps is not None:
            data["num_warps"] = self.num_warps
        data["warps_per_unit"] = self.warps_per_unit
        data["layout"] = self.layout.to_dict()
        if self.capacity is not None:
            data["capacity"] = self.capacity.to_dict()
        data["scopes"] = [scope.to_dict() for scope in self.scopes]
        if self.occupancy is not None:
            data["occupancy"] = self.occupancy.to_dict()
        if self.launch_bound is not None:
            data["launch_bound"] = self.launch_bound.to_dict()
        return data

    @classmethod
    def from_dict(
        cls, data: object, where: str, name: str = METADATA_KEY, *, check_names: bool = False
    ) -> KernelMetadata:
        """Read what ``to_dict`` wrote, checking every field's type and range; ``SchemaError``
        (a ValueError) names the first one that is wrong, as ``{where}: {name}.field ...``. With
        ``check_names``, scope names must also follow the scope-name rule (a file from
        elsewhere); otherwise any text is taken as it is."""
        data = mapping(data, f"{where}: {name}")
        layout = _layout(mapping(data.get("layout"), f"{where}: {name}.layout"), where, f"{name}.layout")
        warps_per_unit = integer(data, "warps_per_unit", f"{where}: {name}", 1, MAX_WARPS, required=False)
        num_warps = integer(data, "num_warps", f"{where}: {name}", 1, MAX_WARPS, required=False)
        mode = text(data, "mode", f"{where}: {name}", required=False)
        capacity = data.get("capacity")
        if capacity is not None and not plain_table(capacity):
            raise SchemaError(
                f"{where}: {name}.capacity is {reprlib.repr(capacity)}, not a table of plain values"
            )
        occupancy = data.get("occupancy")
        if occupancy is not None:
            occupancy = Occupancy.from_dict(
                mapping(occupancy, f"{where}: {name}.occupancy"), f"{where}: {name}.occupancy"
            )
        launch_bound = data.get("launch_bound")
        if launch_bound is not None:
            try:
                launch_bound = parse_launch_bound(launch_bound, f"{where}: {name}.launch_bound")
            except BoundError as error:
                raise SchemaError(str(error)) from None
        return cls(
            layout=layout,
            scopes=_scopes(data.get("scopes", []), f"{where}: {name}.scopes", check_names),
            warps_per_unit=1 if warps_per_unit is None else warps_per_unit,
            num_warps=num_warps,
            mode=mode,
            capacity=None if capacity is None else Capacity.from_dict(capacity, f"{where}: {name}.capacity"),
            occupancy=occupancy,
            launch_bound=launch_bound,
        )


def _layout(data: Mapping[str, Any], where: str, name: str) -> BufferLayout:
    version = data.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise SchemaError(
            f"{where}: buffer layout version {reprlib.repr(version)} is not one this proton_ik reads "
            f"({', '.join(map(str, READ_VERSIONS))}); render it with the proton_ik release that captured it"
        )
    units = integer(data, "units", f"{where}: {name}", 1, MAX_UNITS)
    capacity = integer(data, "capacity", f"{where}: {name}", 0, MAX_CAPACITY)
    aggregate_scopes = integer(data, "aggregate_scopes", f"{where}: {name}", 1, MAX_SCOPES, required=False)
    sampling = mapping(data.get("sampling", {}), f"{where}: {name}.sampling")
    try:
        layout = BufferLayout(
            version=int(version),
            units=units,
            capacity=capacity,
            aggregate_scopes=aggregate_scopes or 0,
            sampling=Sampling.from_dict(sampling),
        )
    except ValueError as error:
        raise SchemaError(f"{where}: {error}") from None
    cta_bytes = data.get("cta_bytes", layout.cta_bytes)
    if cta_bytes != layout.cta_bytes:
        raise SchemaError(
            f"{where}: {name}.cta_bytes is {reprlib.repr(cta_bytes)}, but {units} units of {capacity} "
            f"entries take {layout.cta_bytes}"
        )
    return layout


def _scopes(scopes: object, where: str, check_names: bool) -> tuple[Scope, ...]:
    if not isinstance(scopes, list):
        raise SchemaError(f"{where} is a {type(scopes).__name__}, not a list")
    table: dict[int, Scope] = {}
    for number, scope in enumerate(scopes):
        here = f"{where}[{number}]"
        scope = mapping(scope, here)
        scope_id = integer(scope, "id", here, 0, MAX_SCOPES - 1)
        if scope_id in table:
            raise SchemaError(f"{here}: scope id {scope_id} is listed twice")
        name = scope.get("name")
        problem = scope_name_problem(name) if check_names else None
        if problem is None and not isinstance(name, str):
            problem = f"'name' is {shown(name)}, not text"
        if problem:
            raise SchemaError(f"{here}: {problem}")
        line = integer(scope, "line", here, 0, MAX_LINE, required=False, nullable=True)
        kind = scope.get("kind", "scope")
        if kind not in NAME_KINDS:
            raise SchemaError(f"{here}: 'kind' is {shown(kind)}, not one of {NAME_KINDS}")
        instances = integer(scope, "instances", here, 1, MAX_EVENT_INSTANCES, required=False)
        file = text(scope, "file", here, required=False)
        table[scope_id] = Scope(scope_id, str(name), line, kind, instances, file)
    return tuple(table.values())


def write_compile_metadata(metadata: dict[str, Any], kernel: KernelMetadata) -> None:
    """Put an instrumented kernel into its compile's metadata: Triton's profile scratch size and
    alignment, so that its launcher asks for the buffer, and ours."""
    metadata[SCRATCH_SIZE_KEY] = kernel.layout.cta_bytes
    metadata[SCRATCH_ALIGN_KEY] = CTA_ALIGN
    metadata[METADATA_KEY] = kernel.to_dict()


def read_compile_metadata(metadata: Mapping[str, Any], where: str) -> KernelMetadata | None:
    """A compiled kernel's metadata (Triton's JSON) read back; None if it is not instrumented."""
    kernel = metadata.get(METADATA_KEY)
    return KernelMetadata.from_dict(kernel, where) if kernel else None
