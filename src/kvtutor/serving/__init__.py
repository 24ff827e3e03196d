"""Serving many requests: ``loop`` (continuous batching, one scheduler step), ``metrics``
(time to first token, inter-token latency), ``speculative`` (draft and verify), ``backends``
(what a NumPy and a torch model each need to be served), ``paged_trace`` (a request trace over
the paged and prefix caches) and ``disagg`` (prefill and decode on separate machines).
"""

from .loop import (
    LATENCY_METRICS,
    PERCENTILES,
    BatchSweepRow,
    LatencySummary,
    RequestLatency,
    RequestRecord,
    ServedOutputs,
    ServingTrace,
    StepRecord,
    batch_size_sweep,
    check_budget,
    check_requests,
    latency_summary,
    run_serving,
    serve,
    serve_static,
    step_durations,
    take_chunks,
    token_times,
)

# The loop's names are the package's: `from kvtutor import serving; serving.serve(...)`.
__all__ = [
    "serve",
    "serve_static",
    "run_serving",
    "take_chunks",
    "check_budget",
    "ServingTrace",
    "RequestRecord",
    "StepRecord",
    "check_requests",
    "ServedOutputs",
    "latency_summary",
    "step_durations",
    "token_times",
    "LatencySummary",
    "RequestLatency",
    "LATENCY_METRICS",
    "PERCENTILES",
    "batch_size_sweep",
    "BatchSweepRow",
]
