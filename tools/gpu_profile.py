"""Kernel tables of one fixed-shape decode step, before and after the key buckets.

Run by tools/gpu_check.sh (``OUT=dir python3 tools/gpu_profile.py``): the 1.3B GPT-2 shape in bf16,
batch 1, cache capacity 4096, 16 tokens in the cache. "whole" attends over all 4096
slots (what the step did at commit 6d8bdd6); "bucket" over the 64-key bucket that holds the 16
tokens (what ``compile_decode`` does now). Each step runs eagerly under ``torch.profiler``, so
the table lists every kernel a CUDA graph would replay. Writes ``$OUT/kernels-whole.txt``,
``$OUT/kernels-bucket.txt`` and ``$OUT/profile.json`` (GPU time per step of each).
DEVICE=cpu SIZE=tiny rehearses it on a machine without a GPU.
"""

import json
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from kvtutor import bench
from kvtutor.environment import env_choice, env_text
from kvtutor.models.cuda_graphs import bucket_for, decode_fixed

OUT = env_text("OUT") or "."
DEVICE = env_text("DEVICE") or "cuda"
TINY = env_choice("SIZE", ("tiny", "quick", "full"), "full") == "tiny"  # what gpu_check.sh passes on
os.makedirs(OUT, exist_ok=True)
t0 = time.perf_counter()
name, capacity, context = ("tiny", 128, 16) if TINY else ("gpt2-1.3b", 4096, 16)
model = bench.make_model(name, DEVICE, "float32" if DEVICE == "cpu" else "bfloat16")
cache = model.new_cache(1, capacity)
model.prefill(torch.randint(0, model.config.vocab_size, (1, context), device=DEVICE), cache)
ids_B = torch.tensor([1], device=DEVICE)
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
sort = "cuda_time_total" if DEVICE == "cuda" else "cpu_time_total"
summary = {
    "model": name,
    "capacity": capacity,
    "context": context,
    "device": DEVICE,
    "gpu": torch.cuda.get_device_name(0) if DEVICE == "cuda" else None,
    "torch": torch.__version__,
}
for label, n_keys in (("whole", capacity), ("bucket", bucket_for(context + 1, capacity))):
    with torch.inference_mode():
        for _ in range(3):  # warm-up (kernel selection, cuDNN plans)
            decode_fixed(model, ids_B, cache, n_keys)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            for _ in range(5):
                decode_fixed(model, ids_B, cache, n_keys)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=70)
    with open(os.path.join(OUT, f"kernels-{label}.txt"), "w") as f:
        f.write(
            f"# one decode step x 5, {name}, capacity {capacity}, context {context}, "
            f"attention over {n_keys} keys\n{table}\n"
        )
    events = prof.key_averages()
    gpu_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in events)
    summary[label] = {"n_keys": n_keys, "gpu_us_per_step": gpu_us / 5}
    print(label, n_keys, "keys:", round(gpu_us / 5, 1), "us of GPU time per step", flush=True)
summary["seconds"] = round(time.perf_counter() - t0, 1)
with open(os.path.join(OUT, "profile.json"), "w") as f:
    json.dump(summary, f, indent=1)
