"""``python -m kvtutor bench``: measure prefill and decode against this machine's own ceilings.

One run probes the machine (read bandwidth, copy bandwidth, matmul FLOP/s), then measures the
model and writes every number, as seconds and as ratios to those ceilings, to one JSON file:

- prefill time vs prompt length and decode time vs batch size, as points on the roofline;
- the batch size at which decode turns compute-bound, measured and predicted by the cost model;
- how fast a batch-1 decode step reads its weights, against one large GEMV (or a device copy);
- ``TorchGPT2Model.generate`` against ``transformers``' ``generate`` (same weights, same tokens);
- prefill FLOP/s against the faster of BLAS's and oneDNN's matmul in the model's own shapes;
- on a CPU, bf16 against float32 (decode and prefill) and decode steps of a few rows against one
  row's, beside the roofline (``cpu``);
- the preallocated cache against the concat cache;
- tokens/s with and without the cache as the sequence grows.

Sizes: ``tiny`` (tests), ``quick`` (CI, the default on a CPU) and ``full`` (the goals' sizes, the
default on CUDA); ``--quick``/``--size`` or ``KVTUTOR_BENCH_SIZE`` choose. Each section is also a
function that the book's chapters call with small sizes.

The package: ``tables`` (the model shapes and the sizes of each section), ``common`` (what the
experiments share), ``experiments``, ``engine`` and ``cpu`` (the sections, one function each) and ``cli``
(``run``, ``main``, writing the JSON and the plots). The goals and the result JSON's schema, which
the readers of recorded runs need as well, are ``kvtutor.measure.goals`` and
``kvtutor.measure.schema``. Every name the chapters use is here.
"""

from __future__ import annotations

from ..measure.goals import GIB, GPU_GOALS, evaluate_goals
from ..measure.schema import SCHEMA_VERSION, check_result, load_result
from .cli import main, run, summary, write_result
from .common import ceilings, make_model
from .cpu import model_products, products_in_use, run_batch_sweep, run_bf16_vs_fp32
from .engine import run_big_decode, run_engine, run_generate_vs_hf_static, run_graph_vs_concat
from .experiments import (
    add_predictions,
    run_append,
    run_cache_vs_recompute,
    run_decode_bandwidth,
    run_decode_sweep,
    run_generate_vs_transformers,
    run_preallocated_vs_concat,
    run_prefill_sweep,
    run_prefill_vs_matmul,
)
from .tables import MODELS, SIZES, sizes

__all__ = [
    "GIB",
    "GPU_GOALS",
    "MODELS",
    "SIZES",
    "SCHEMA_VERSION",
    "sizes",
    "ceilings",
    "make_model",
    "run_prefill_sweep",
    "run_decode_sweep",
    "run_decode_bandwidth",
    "run_prefill_vs_matmul",
    "run_generate_vs_transformers",
    "run_preallocated_vs_concat",
    "run_append",
    "run_cache_vs_recompute",
    "run_engine",
    "run_big_decode",
    "run_generate_vs_hf_static",
    "run_graph_vs_concat",
    "run_bf16_vs_fp32",
    "run_batch_sweep",
    "products_in_use",
    "model_products",
    "add_predictions",
    "evaluate_goals",
    "check_result",
    "load_result",
    "write_result",
    "summary",
    "run",
    "main",
]
