"""Measuring: what the theory predicts and what a machine does.

``costs`` (FLOPs and bytes of each pass), ``memory`` (KV and weight memory of real models),
``timing`` (timers and the machine's ceilings), ``knee``, ``flash`` (tiled attention's traffic),
and the recorded runs: ``schema`` (their JSON format), ``goals``, ``recorded`` (loading them) and
``gpu_report``. The experiments that write the runs are ``kvtutor.bench``.
"""
