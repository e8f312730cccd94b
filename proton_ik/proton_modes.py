"""Triton Proton's instrumentation modes, mapped onto ours, so that code written for
``triton.profiler`` runs with only the import changed.

``proton.mode.Default(...)`` and strings such as ``"default:buffer_type=global:buffer_size=4096"``
become a ``Mode``. Each of Proton's fields maps as follows:

- ``metric_type``: ``cycle`` (the only one; we record clock cycles too);
- ``granularity``: each value becomes ours: ``warp``, ``warp_2`` .. ``warp_8`` (units of 1 to 8
  warps), ``warp_group``, ``warp_group_2`` .. ``warp_group_8`` (1 to 8 warpgroups), ``cta``;
- ``buffer_size``: bytes per recording unit, ``0`` for ours to size from the code (capacity
  ``auto``); otherwise a ring of ``buffer_size / 16`` entries, rounded down to a power of two;
- ``buffer_strategy``: ``circular`` is what our rings do; ``flush`` (Proton's records leave the
  device as its buffer fills) becomes the session's ``flush_every=1``: each launch's records go
  to the session file as soon as the drain takes it (``flushes_every_launch``);
- ``buffer_type``: we write to global memory; ``shared``, Proton's default, is mapped silently;
- ``sampling_strategy``: ``none``; ``selective`` with ``sampling_options`` (the unit ids to
  keep, comma-separated) becomes ``warps=``: the first warp of each unit listed (at warp
  granularity the warps listed; at warpgroup granularity ``1`` -> warp 4); at CTA granularity it
  has no meaning (warning);
- ``optimizations``: ``clock32`` and ``time_shift`` are what we always do; ``sched_stores`` and
  ``sched_barriers`` have no meaning (warning).

A value outside Proton's own choices is an error that lists them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from proton_ik.contract.layout import ENTRY_BYTES, Granularity

PROTON_MODE_NAME = "default"

_CHOICES: dict[str, tuple[str, ...]] = {
    "metric_type": ("cycle",),
    "granularity": (
        "cta",
        "warp",
        "warp_2",
        "warp_4",
        "warp_8",
        "warp_group",
        "warp_group_2",
        "warp_group_4",
        "warp_group_8",
    ),
    "buffer_strategy": ("circular", "flush"),
    "buffer_type": ("shared", "global"),
    "sampling_strategy": ("none", "selective"),
}
_OPTIMIZATIONS = ("time_shift", "sched_stores", "sched_barriers", "clock32")
_OURS_ALREADY = ("time_shift", "clock32")  # what proton_ik always does


def _name(value: Any) -> str:
    """A Proton enum (``GRANULARITY.WARP``) or a string, as the string Proton's parser takes."""
    text = str(getattr(value, "name", value))
    return text.rsplit(".", 1)[-1].lower()


@dataclass(frozen=True)
class Default:
    """``triton.profiler.mode.Default``, with the same fields and defaults; ``mode_options()`` maps it."""

    metric_type: Any = "cycle"
    sampling_strategy: Any = "none"
    sampling_options: str = ""
    granularity: Any = "warp"
    buffer_strategy: Any = "circular"
    buffer_type: Any = "shared"
    buffer_size: int = 0
    optimizations: Any = field(default_factory=list)
    name: str = field(default=PROTON_MODE_NAME, init=False)

    def __post_init__(self) -> None:
        for key, choices in _CHOICES.items():
            value = _name(getattr(self, key))
            if value not in choices:
                raise ValueError(
                    f"Proton mode field {key}={value!r} is not one of Proton's choices: {', '.join(choices)}"
                )
            object.__setattr__(self, key, value)
        if (
            isinstance(self.buffer_size, bool)
            or not isinstance(self.buffer_size, int)
            or self.buffer_size < 0
        ):
            raise ValueError(
                f"Proton mode field buffer_size={self.buffer_size!r}: a byte count, 0 for the default"
            )
        names = self.optimizations
        names = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else names
        names = [_name(n) for n in names]
        for name in names:
            if name not in _OPTIMIZATIONS:
                raise ValueError(
                    f"Proton optimization {name!r} is not one of Proton's: {', '.join(_OPTIMIZATIONS)}"
                )
        object.__setattr__(self, "optimizations", tuple(names))

    def __str__(self) -> str:
        return (
            f"{self.name}:metric_type={self.metric_type}:sampling_strategy={self.sampling_strategy}"
            f":sampling_options={self.sampling_options}:granularity={self.granularity}"
            f":buffer_strategy={self.buffer_strategy}:buffer_type={self.buffer_type}"
            f":buffer_size={self.buffer_size}:optimizations={','.join(self.optimizations)}"
        )

    def unsupported(self) -> list[str]:
        """One sentence per field that has no meaning here: what was asked and what we do. A
        field left at Proton's default (buffer_type=shared) is mapped without a word."""
        notes = []
        if self.sampling_strategy == "selective" and self.granularity == "cta":
            notes.append(
                f"sampling_strategy=selective (sampling_options={self.sampling_options!r}) at "
                "granularity=cta: proton_ik samples CTAs with its own ctas= option, and records every CTA here"
            )
        notes += [
            f"optimizations={name}: not needed by proton_ik's lowering"
            for name in self.optimizations
            if name not in _OURS_ALREADY
        ]
        return notes

    @property
    def flushes_every_launch(self) -> bool:
        """``buffer_strategy=flush``: the session writes each launch to its file at once."""
        return self.buffer_strategy == "flush"

    def mode_options(self) -> dict[str, Any]:
        """The fields of our ``Mode`` (``Mode(**options)``, as ``Mode.parse`` makes it) for this
        Proton mode, warning once per field that has no meaning here."""
        for note in self.unsupported():
            warnings.warn(f"proton_ik: Proton mode field {note}; accepted and ignored", stacklevel=4)
        granularity = Granularity(self.granularity.replace("warp_group", "warpgroup"))
        capacity: int | Literal["auto"] = "auto"  # mode.AUTO: sized from each kernel's code
        if self.buffer_size:
            entries = max(self.buffer_size // ENTRY_BYTES, 1)
            capacity = 1 << (entries.bit_length() - 1)  # a power of two, at most buffer_size bytes
        return {"granularity": granularity, "capacity": capacity, "warps": self.selected_warps(granularity)}

    def selected_warps(self, granularity: Granularity) -> tuple[int, ...]:
        """``warps=`` for ``sampling_strategy=selective``: the units listed, as warps (a warpgroup
        by its first warp); () where every unit records."""
        if self.sampling_strategy != "selective" or granularity is Granularity.CTA:
            return ()
        try:
            ids = [int(part) for part in self.sampling_options.split(",") if part.strip()]
        except ValueError:
            raise ValueError(
                f"Proton mode field sampling_options={self.sampling_options!r}: the unit ids to keep, "
                "comma-separated, e.g. sampling_options='0,2'"
            ) from None
        if not ids:
            raise ValueError(
                "Proton mode field sampling_strategy=selective needs sampling_options: the unit ids to "
                "keep, comma-separated, e.g. sampling_options='0,2'"
            )
        per_unit = granularity.fixed_warps or 1
        return tuple(sorted({unit * per_unit for unit in ids}))


def proton_mode(value: Any) -> Default | None:
    """``value`` as a Proton mode, if it is one: a ``"default..."`` string, our ``Default``, or
    ``triton.profiler.mode.Default`` itself; None otherwise."""
    if isinstance(value, Default):
        return value
    if isinstance(value, str):
        return parse_proton_mode(value) if value.split(":")[0] == PROTON_MODE_NAME else None
    if getattr(value, "name", None) == PROTON_MODE_NAME and hasattr(value, "buffer_size"):
        fields = [f for f in Default.__dataclass_fields__ if f != "name"]
        return Default(**{f: getattr(value, f) for f in fields})
    return None


def parse_proton_mode(text: str) -> Default:
    """``"default"`` or ``"default:key=value:..."``, as ``triton.profiler`` accepts it."""
    parts = text.split(":")
    if parts[0] != PROTON_MODE_NAME:
        raise ValueError(f"not a Proton instrumentation mode: {text!r}")
    known = {f for f in Default.__dataclass_fields__ if f != "name"}
    values: dict[str, Any] = {}
    for option in filter(None, parts[1:]):
        key, sep, value = option.partition("=")
        if not sep or key not in known:
            raise ValueError(
                f"bad Proton mode option {option!r} in {text!r}; Proton's options: {', '.join(sorted(known))}"
            )
        values[key] = _option(key, value)
    return Default(**values)


def _option(key: str, value: str) -> Any:
    if key == "buffer_size":
        try:
            return int(value)
        except ValueError:
            raise ValueError(
                f"Proton mode option buffer_size={value!r}: a byte count, e.g. buffer_size=4096"
            ) from None
    return value
