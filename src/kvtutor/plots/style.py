"""One look for every figure: the palette, the page width, and ``pyplot()``.

matplotlib (the ``plots`` extra) is imported by ``pyplot()`` on first use, so ``import kvtutor``
never needs it; without it, the error names the extra to install.
"""

from __future__ import annotations

from typing import Any

from ..extras import missing_extra

__all__ = [
    "pyplot",
    "PAGE_WIDTH",
    "BLUE",
    "ORANGE",
    "GREEN",
    "RED",
    "PURPLE",
    "GREY",
    "LIGHT_GREY",
    "DARK",
    "TAB_GREEN",
    "TAB_RED",
    "PROMPT_COLOR",
    "DECODE_COLOR",
    "NEW_EDGE",
    "EMPTY_COLOR",
    "COMPUTED_COLOR",
    "WEIGHT_COLOR",
    "RESULT_COLOR",
    "ROOF_COLOR",
    "FIT_COLOR",
    "WAIT_COLOR",
    "POLICY_COLORS",
    "SERIES_COLORS",
    "KIND_COLORS",
    "COLORS",
    "DASHES",
    "PREDICTED_STYLE",
]

#: inches: the book's text column at 1280 px is about 700 px wide, and figures are drawn at
#: 100 dpi, so a figure this wide is shown at its own size and its fonts keep their size
PAGE_WIDTH = 7.0

# ---------------------------------------------------------------- the colours
BLUE = "#4c78a8"
ORANGE = "#f58518"
GREEN = "#54a24b"
RED = "#e45756"
PURPLE = "#b279a2"
GREY = "#bab0ac"
LIGHT_GREY = "#d9d9d9"
DARK = "#333333"
TAB_GREEN = "#2ca02c"  # matplotlib's own green and red (its "tab10" cycle)
TAB_RED = "#d62728"

# ---------------------------------------------------------------- what they stand for
PROMPT_COLOR = BLUE  # K/V written by prefill; prefill in the performance figures
DECODE_COLOR = ORANGE  # K/V written by decode steps, and the new token
NEW_EDGE = TAB_RED  # outline of what this step writes
EMPTY_COLOR = "#eeeeee"  # reserved, not yet written
COMPUTED_COLOR = GREEN  # K/V rows computed in this pass
WEIGHT_COLOR = GREY  # a weight matrix, read from memory
RESULT_COLOR = PURPLE  # the product
ROOF_COLOR = DARK  # rooflines, floors and proportional lines
FIT_COLOR = TAB_GREEN  # fitted lines, knees, and the CUDA-graph runs of the performance figures
WAIT_COLOR = LIGHT_GREY  # a request waiting for a slot
#: the two batching policies of the serving chapters
POLICY_COLORS = {"static": RED, "continuous": GREEN}
#: lines or bars of one figure, in order
SERIES_COLORS = [BLUE, ORANGE, GREEN, PURPLE, RED]
#: whose code ran a GPU configuration: the weight products alone, kvtutor, transformers
KIND_COLORS = {"products": BLUE, "kvtutor": ORANGE, "transformers": "#9d9d9d"}
#: one colour per model (or KV head group) in the memory chapters, in order
COLORS = [
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
]

# ---------------------------------------------------------------- line styles
#: dash patterns for lines that share a style otherwise (the weights in plot_memory_vs_context)
DASHES = [
    (0, (6, 2)), (0, (2, 1.5)), (0, (7, 2, 1.5, 2)), (0, (12, 3)),
    (0, (1, 1)), (0, (4, 1.5, 1, 1.5, 1, 1.5)), (0, (9, 2, 2, 2, 2, 2)), (0, (3, 3)),
]  # fmt: skip
#: a prediction (roofline, cost model) drawn beside its measurement
PREDICTED_STYLE = {"linestyle": "--", "linewidth": 1.2, "alpha": 0.8}


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported now; without matplotlib, a ModuleNotFoundError that names
    the extra to install."""
    try:
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, "kvtutor's figures")
        if error is None:
            raise
        raise error from None
    return plt
