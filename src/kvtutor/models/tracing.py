"""What a NumPy pass computed, layer by layer, read off the real functions as they return.

``model.forward(ids, cache, trace=[])`` fills the list with one dict per layer: the block's input
and output (``x_in_TD``, ``x_out_TD``), and the arrays its attention made (``q_HTK``, ``k_HSK``,
``v_HSK``, ``scores_HTS``, ``a_HTS``, ``o_HTK``, ``attn_out_TD``). The model's functions carry no
hook for this: while the pass runs, a profiler (``sys.setprofile``) watches the family's ``block``
and ``attention`` and the shared ``attention_core``, and copies their local arrays when each
returns, as a debugger reads a frame. So the code the book shows is exactly the code that runs,
traced or not, and a pass without a trace pays nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["TRACED_NAMES", "capture_layers"]

#: The local arrays a trace keeps (a family may add its own through ``aliases``).
TRACED_NAMES = ("q_HTK", "k_HSK", "v_HSK", "scores_HTS", "a_HTS", "o_HTK")


@contextmanager
def capture_layers(
    trace: list[dict[str, np.ndarray]] | None,
    block: Callable[..., Any],
    watched: tuple[Callable[..., Any], ...],
    aliases: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """While the ``with`` body runs, each call of ``block`` opens a dict in ``trace`` (its input
    ``x_TD`` as ``x_in_TD``, its result as ``x_out_TD``); each return of a function in
    ``watched`` copies its local arrays named in ``TRACED_NAMES`` (or in ``aliases``, under the
    alias) into the open dict, and the return value of the first of them as ``attn_out_TD``.
    With ``trace`` None, nothing is watched."""
    if trace is None:
        yield
        return
    aliases = dict(aliases or {})
    block_code, attention_code = block.__code__, watched[0].__code__
    codes = {fn.__code__ for fn in watched}
    previous = sys.getprofile()

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if code is block_code:
            if event == "call":
                trace.append({"x_in_TD": np.array(frame.f_locals["x_TD"])})
            elif event == "return" and trace:
                trace[-1]["x_out_TD"] = np.array(arg)
        elif event == "return" and code in codes and trace:
            layer = trace[-1]
            for name, value in frame.f_locals.items():
                key = aliases.get(name, name if name in TRACED_NAMES else None)
                if key is not None and isinstance(value, np.ndarray):
                    layer[key] = np.array(value)
            if code is attention_code:
                layer["attn_out_TD"] = np.array(arg)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
