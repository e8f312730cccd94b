"""Figures as inline SVG: heatmaps (their cells one embedded PNG, so that 132 x 160 cells cost
kilobytes, not megabytes), colour bars and small histograms. Text is escaped here, always."""

from __future__ import annotations

import base64
import struct
import zlib
from html import escape

import numpy as np

from proton_ik.viewer.report.figures import HIST_STEPS, Heatmap

# Stops of a perceptually ordered map (viridis' ends and middle), RGB; missing cells are grey.
_STOPS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], np.float64)
_MISSING = np.array([235, 235, 235], np.uint8)
ROW_PX, LABEL_PX, PLOT_PX = 3, 150, 960


def colours(values: np.ndarray) -> np.ndarray:
    """RGB (uint8, one more axis) of ``values`` in [0, 1]; NaN as light grey."""
    finite = np.isfinite(values)
    at = np.clip(np.where(finite, values, 0), 0, 1) * (len(_STOPS) - 1)
    low = np.minimum(np.floor(at).astype(np.int64), len(_STOPS) - 2)
    fraction = (at - low)[..., None]
    rgb = (_STOPS[low] * (1 - fraction) + _STOPS[low + 1] * fraction).round().astype(np.uint8)
    rgb[~finite] = _MISSING
    return rgb


def png(rgb: np.ndarray) -> bytes:
    """An RGB image (rows x columns x 3, uint8) as PNG bytes."""
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def _data_uri(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png(rgb)).decode("ascii")


def heatmap_svg(heatmap: Heatmap, row_px: int = ROW_PX, vmax: float = 1.0, label_px: int = LABEL_PX) -> str:
    """The heatmap with its row labels (every one where rows are tall enough, else a few), time or
    CTA ticks under it, and a colour bar from 0 to ``vmax``."""
    values = heatmap.values
    rows = values.shape[0]
    height = rows * row_px
    every = max(1, -(-12 // row_px))  # a label every ``every`` rows: 12 px apart at least
    labels = "".join(
        f'<text x="{label_px - 4}" y="{i * row_px + row_px / 2 + 4:.1f}" text-anchor="end">'
        f"{escape(heatmap.rows[i])}</text>"
        for i in range(0, rows, every)
    )
    low, high = heatmap.x_span
    ticks = "".join(
        f'<text x="{label_px + PLOT_PX * k / 4:.0f}" y="{height + 14}" text-anchor="middle">'
        f"{escape(short_number(low + (high - low) * k / 4))}</text>"
        for k in range(5)
    )
    image = _data_uri(colours(np.clip(values / vmax, 0, 1)))
    return (
        f'<svg class="heat" width="{label_px + PLOT_PX + 40}" height="{height + 40}" role="img">'
        f"<title>{escape(heatmap.title)}: {escape(heatmap.value_label)}</title>"
        '<g transform="translate(0,6)">'
        f'<image x="{label_px}" y="0" width="{PLOT_PX}" height="{height}" preserveAspectRatio="none" '
        f'href="{image}"/>{labels}{ticks}'
        f'<text x="{label_px + PLOT_PX / 2}" y="{height + 30}" text-anchor="middle">'
        f"{escape(heatmap.x_label)}{f' ({escape(heatmap.x_unit)})' if heatmap.x_unit else ''}</text></g></svg>"
    )


def colour_bar(label: str, low: str, high: str) -> str:
    """A horizontal bar of the colour map, ``low`` to ``high``."""
    image = _data_uri(colours(np.linspace(0, 1, 64)[None, :]))
    return (
        f'<svg class="bar" width="480" height="22" role="img"><title>{escape(label)}</title>'
        f'<text x="0" y="14">{escape(low)}</text>'
        f'<image x="40" y="2" width="200" height="14" preserveAspectRatio="none" href="{image}"/>'
        f'<text x="246" y="14">{escape(high)} {escape(label)}</text></svg>'
    )


def histogram_svg(counts: np.ndarray, first_bin: int, width: int = 180, height: int = 36) -> str:
    """Bars of a scope's duration histogram, each with its range and count as a tooltip."""
    if not len(counts):
        return ""
    peak = max(int(counts.max()), 1)
    bar = width / len(counts)
    bars = []
    for i, count in enumerate(counts.tolist()):
        low, high = (2 ** ((first_bin + i + k) / HIST_STEPS) for k in (0, 1))
        tall = height * count / peak
        bars.append(
            f'<rect x="{i * bar:.1f}" y="{height - tall:.1f}" width="{max(bar - 0.5, 0.5):.1f}" '
            f'height="{tall:.1f}"><title>{short_number(low)}-{short_number(high)} ns: {count:,}</title></rect>'
        )
    low, high = 2 ** (first_bin / HIST_STEPS), 2 ** ((first_bin + len(counts)) / HIST_STEPS)
    return (
        f'<svg class="hist" width="{width}" height="{height + 12}" role="img">'
        f"<title>durations, {short_number(low)} to {short_number(high)} ns, log scale</title>{''.join(bars)}"
        f'<text x="0" y="{height + 11}">{short_number(low)}</text>'
        f'<text x="{width}" y="{height + 11}" text-anchor="end">{short_number(high)} ns</text></svg>'
    )


def short_number(value: float) -> str:
    """A tick's value, short: 1.2k, 35M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"
