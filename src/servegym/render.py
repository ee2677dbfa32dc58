"""Small RGB pictures of an env's state for ``render_mode="rgb_array"`` (video recorders, SB3's
``make_vec_env``, notebooks): a row of vertical bars, each a quantity scaled to [0, 1].

Pure numpy, no plotting library: a frame costs microseconds, so recording a video does not slow an episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

#: Bar colours (RGB) shared by the families' pictures.
BLUE = (40, 90, 200)
LIGHT_BLUE = (150, 180, 235)
ORANGE = (230, 130, 30)
LIGHT_ORANGE = (245, 200, 150)
GREEN = (40, 170, 60)
RED = (200, 40, 40)
PURPLE = (130, 60, 170)
GREY = (110, 110, 110)
BLACK = (0, 0, 0)


@dataclass(frozen=True)
class Bar:
    """One bar: ``value`` (fraction of full height, clipped to [0, 1]) in ``color``; ``stacked`` adds a second
    segment of that fraction on top (e.g. starting instances above active ones) in ``stacked_color``;
    ``marker`` draws a black tick at that fraction (a target or a limit), None for none."""

    value: float
    color: tuple[int, int, int]
    stacked: float = 0.0
    stacked_color: tuple[int, int, int] = LIGHT_BLUE
    marker: float | None = None


def _frac(x: float) -> float:
    x = float(x)
    return 0.0 if not np.isfinite(x) else min(max(x, 0.0), 1.0)


def render_bars(bars: Sequence[Bar], height: int = 96, width: int = 12, gap: int = 4) -> NDArray[np.uint8]:
    """A ``height`` x (n (``width`` + ``gap``) + ``gap``) RGB image (uint8) of ``bars`` on white, left to right,
    with a grey baseline."""
    n = len(bars)
    img = np.full((height, n * (width + gap) + gap, 3), 255, dtype=np.uint8)
    top = height - 4  # bars stand on a baseline 3 px above the bottom edge
    img[top, :] = GREY
    for i, bar in enumerate(bars):
        x0 = gap + i * (width + gap)
        lo = _frac(bar.value)
        hi = _frac(lo + _frac(bar.stacked))
        y_lo = top - round(lo * top)
        y_hi = top - round(hi * top)
        img[y_lo:top, x0:x0 + width] = bar.color
        if y_hi < y_lo:
            img[y_hi:y_lo, x0:x0 + width] = bar.stacked_color
        if bar.marker is not None:
            y = min(top - round(_frac(bar.marker) * top), top - 1)
            img[max(y - 1, 0):y + 1, x0 - 1:x0 + width + 1] = BLACK
    return img
