"""The ways a kernel is compiled side by side: plain, under proton_ik's modes, in a part of the
default mode (``scope_parts.py``), or under Proton's modes. Names only: no torch, no GPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from benchmarks import scope_parts
from proton_ik.contract.layout import Granularity
from proton_ik.mode import Mode

PROTON_DEFAULT_MODES = {"proton_global": "default:buffer_type=global", "proton_shared": "default"}


@dataclass(frozen=True)
class Variant:
    """One way to compile a kernel: plain, under a proton_ik mode, under a Proton mode, or in a
    part of a proton_ik mode (``part``: one of ``scope_parts.PARTS``)."""

    label: str
    profiler: str | None  # None, "proton_ik" or "proton", as scopes.active_profiler() names them
    mode: str = ""
    part: str = ""


def _option_text(value: object) -> str:
    if isinstance(value, Granularity):
        return value.value
    if isinstance(value, tuple):  # sampled CTAs or warps
        return ",".join(map(str, value))
    return str(value)


def ik_label(mode: Mode) -> str:
    """``proton_ik`` for the default mode, else ``proton_ik[option=value:...]`` with the options
    that differ from it."""
    default = Mode()
    changed = [
        f"{f.name}={_option_text(getattr(mode, f.name))}"
        for f in dataclasses.fields(Mode)
        if getattr(mode, f.name) != getattr(default, f.name)
    ]
    return f"proton_ik[{':'.join(changed)}]" if changed else "proton_ik"


def make_variants(ik_modes: list[str], proton_modes: list[str]) -> list[Variant]:
    """plain, proton_ik's default mode and ``ik_modes``, Proton's two buffers and ``proton_modes``."""
    variants = [Variant("plain", None), Variant("proton_ik", "proton_ik", str(Mode()))]
    for text in ik_modes:
        mode = Mode.parse(text)
        if mode != Mode():
            variants.append(Variant(ik_label(mode), "proton_ik", str(mode)))
    variants += [Variant(label, "proton", mode) for label, mode in PROTON_DEFAULT_MODES.items()]
    variants += [Variant(f"proton[{m}]", "proton", m) for m in proton_modes]
    return variants


def part_variants(mode: Mode | None = None) -> list[Variant]:
    """The parts of ``mode`` (the default mode if None), markers first."""
    mode = mode or Mode()
    return [Variant(scope_parts.LABELS[part], "proton_ik", str(mode), part) for part in scope_parts.PARTS]


def with_parts(variants: list[Variant]) -> list[Variant]:
    """``variants`` with the parts of the default mode just before it."""
    out: list[Variant] = []
    for variant in variants:
        if variant.profiler == "proton_ik" and not variant.part and variant.mode == str(Mode()):
            out += part_variants()
        out.append(variant)
    return out
