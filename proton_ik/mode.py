"""Profiling modes: what the instrumented kernel records, as a frozen dataclass whose ``str``
round-trips through ``Mode.parse``.

The string is also the value of ``triton.knobs.compilation.instrumentation_mode``, which is
part of Triton's cache key, so kernels compiled under different modes never mix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from proton_ik.layout import Granularity

PREFIX = "proton_ik"


_SWITCHES = {"on": True, "off": False}


def _option_value(key: str, value: str) -> object:
    if key == "capacity":
        return int(value)
    if key == "pairs":
        if value not in _SWITCHES:
            raise ValueError(f"pairs={value!r}: use pairs=on or pairs=off")
        return _SWITCHES[value]
    return value


@dataclass(frozen=True)
class Mode:
    """One instrumentation configuration.

    ``instrumentation:granularity=warp:capacity=512:pairs=on`` is the default.
    ``capacity`` is ring entries per unit. An entry holds one record, or both records of a
    scope whose begin and end sit in straight-line code. When a unit writes more, the ring
    keeps the newest entries and the trace reports exactly how many records were overwritten.
    """

    granularity: Granularity = Granularity.WARP
    capacity: int = 512
    pairs: bool = True  # a begin and its end in straight-line code share one 16-byte store

    def __post_init__(self) -> None:
        object.__setattr__(self, "granularity", Granularity(self.granularity))
        if self.capacity < 1 or self.capacity & (self.capacity - 1) or self.capacity > 1 << 24:
            raise ValueError(
                f"capacity={self.capacity}: entries per unit must be a power of two between 1 and "
                f"{1 << 24}, e.g. capacity=512"
            )

    def __str__(self) -> str:
        pairs = "on" if self.pairs else "off"
        return f"instrumentation:granularity={self.granularity.value}:capacity={self.capacity}:pairs={pairs}"

    @property
    def knob(self) -> str:
        """The value for ``knobs.compilation.instrumentation_mode``."""
        return f"{PREFIX}:{self}"

    @classmethod
    def parse(cls, text: str | Mode | None) -> Mode:
        if isinstance(text, Mode):
            return text
        if not text:
            return cls()
        parts = text.split(":")
        if parts[0] == PREFIX:
            parts = parts[1:]
        if not parts or parts[0] != "instrumentation":
            raise ValueError(
                f"unknown mode {text!r}: proton_ik has one mode, 'instrumentation', with options "
                "like 'instrumentation:granularity=warp:capacity=512'"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, object] = {}
        for option in parts[1:]:
            key, sep, value = option.partition("=")
            if not sep or key not in fields:
                raise ValueError(
                    f"bad mode option {option!r} in {text!r}; known options: {', '.join(fields)}"
                )
            values[key] = _option_value(key, value)
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValueError as error:
            raise ValueError(f"bad mode {text!r}: {error}") from None

    @classmethod
    def from_knob(cls, knob: str) -> Mode | None:
        """The mode a Triton instrumentation_mode string stands for, or None if it is not ours."""
        if not knob or not knob.startswith(PREFIX + ":"):
            return None
        return cls.parse(knob)
