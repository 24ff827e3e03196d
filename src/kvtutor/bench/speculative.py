"""Record speculative decoding's speed-ups on this CPU, beside what the theory predicts.

``python -m kvtutor.bench.speculative --out src/kvtutor/data/runs/speculative-cpu.json`` (run it
with ``OPENBLAS_NUM_THREADS=1``) writes one JSON file, read back by ``load()``, with two settings:

- ``toy``: the toy model (NumPy, 2 layers) with its one-layer draft and prompt lookup, over the toy
  corpus's prompts, for k = 1, 2, 4 and 6: a model so small that fixed costs set the time, where
  speculative decoding loses;
- ``memory_bound``: a GPT-2-shaped torch model with random weights (0.6 GiB in float32), whose
  decode step reads its weights from memory, and a ``CoinDraft`` that pays a one-layer draft's
  decode steps and agrees with the target at a rate set in advance (random weights give no draft
  a meaningful acceptance rate of its own), for several rates and k.

Each setting records the costs the theory needs (a draft step and a verification pass over k + 1
rows, in target decode steps), the acceptance rate, and the wall-clock time of plain and of
speculative decoding. The machine may be busy with other work: every round times every
configuration once, in a shuffled order, so that a change in the load hits all of them alike, and
the file keeps the medians over the rounds, every sample, the load average of each round, and
the process's CPU time beside the wall-clock time as a check (``measured_cpu``).
One torch thread throughout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..measure import costs, recorded
from ..measure.timing import describe, hardware_info, load_average, versions
from ..models.config import GPT2Config
from ..serving import speculative as spec
from ..serving.backends import forward_one, is_torch_model
from .common import check_output_path, finite, write_atomically

__all__ = ["FILE", "COMMAND", "MEMORY_BOUND_CONFIG", "record", "load", "main"]

#: the recorded file, under ``kvtutor/data/runs``
FILE = "speculative-cpu.json"
#: the command that re-records it, from the repository root
COMMAND = (
    f"OPENBLAS_NUM_THREADS=1 .venv/bin/python -m kvtutor.bench.speculative --out src/kvtutor/data/runs/{FILE}"
)

#: the memory-bound target: GPT-2's shape at width 1024, 12 layers, a vocabulary of 8192
MEMORY_BOUND_CONFIG = GPT2Config(vocab_size=8192, d_model=1024, n_heads=16, n_layers=12, max_seq_len=128)
#: (acceptance rate set, k) of each CoinDraft run; the rate sweep at k = 4, then k = 2 and 8
MEMORY_BOUND_SETTINGS = [(a, 4) for a in (0.3, 0.5, 0.7, 0.8, 0.9, 1.0)] + [(0.8, 2), (0.8, 8)]
TOY_KS = (1, 2, 4, 6)
TOY_DRAFTS = ("layer cut (1 of 2 layers)", "prompt lookup")

#: what ``load`` checks the file for (the chapter reads these)
KEYS = {
    "top": (
        "schema",
        "command",
        "date",
        "machine",
        "hardware",
        "versions",
        "load_average",
        "toy",
        "memory_bound",
    ),
    "toy": ("ks", "cost", "plain_s", "drafts", "n_prompts"),
    "memory_bound": (
        "config",
        "weights_bytes",
        "step_s",
        "read_GBps",
        "intensity",
        "pass_v",
        "c",
        "settings",
    ),
    "setting": ("a_set", "k", "acceptance", "tokens_per_pass", "formula", "formula_v", "measured", "seconds"),
}


def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=float)))


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _interleaved(
    configs: dict[str, Callable[[], Any]], rounds: int, seed: int, loads: list[float | None]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """name -> ``rounds`` wall-clock timings of its function, and as many of this process's CPU
    time (which other work on the machine affects less); every round times all of them in a
    shuffled order (seeded), and the load average before each round is appended to ``loads``."""
    rng = np.random.default_rng(seed)
    names = list(configs)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        loads.append(load_average())
        for i in rng.permutation(len(names)):
            cpu_start = time.process_time()
            wall[names[i]].append(_timed(configs[names[i]]))
            cpu[names[i]].append(time.process_time() - cpu_start)
    return wall, cpu


def _pass_timer(model: Any, context: list[int], n_rows: int, repeats: int = 5) -> Callable[[], float]:
    """A function that times a pass over ``n_rows`` new rows after ``context`` (median of
    ``repeats``), rolling the cache back after each."""
    cache = model.new_cache(1) if is_torch_model(model) else model.new_cache()
    forward_one(model, context, cache)
    rows = [1 + i % (model.config.vocab_size - 1) for i in range(n_rows)]

    def run() -> float:
        times = []
        for _ in range(repeats + 1):  # the first one warms up
            times.append(_timed(lambda: forward_one(model, rows, cache)))
            cache.truncate(len(context))
        return _median(times[1:])

    return run


def _interleaved_costs(
    timers: dict[str, Callable[[], float]], rounds: int, loads: list[float | None]
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        loads.append(load_average())
        for name, timer in timers.items():
            out[name].append(timer())
    return out


def _merged(results: Sequence[spec.SpeculativeResult]) -> spec.SpeculativeResult:
    out = spec.SpeculativeResult([], results[0].k)
    for r in results:
        out.tokens += r.tokens
        out.proposed += r.proposed
        out.accepted += r.accepted
    return out


# ---------------------------------------------------------------- the toy model: fixed costs


def record_toy(rounds: int = 7, loads: list[float | None] | None = None) -> dict[str, Any]:
    """The toy target, its one-layer draft and prompt lookup, on every other corpus prompt."""
    from ..models.toy import TOY_CORPUS, TOY_PROMPT, load_toy_model, load_toy_tokenizer

    loads = [] if loads is None else loads
    model, tok = load_toy_model(), load_toy_tokenizer()
    prompts: list[list[int]] = []
    for line in TOY_CORPUS:
        for n in (2, 3):
            ids = tok.encode(" ".join(line.split()[:n]))
            if ids not in prompts:
                prompts.append(ids)
    timed = prompts[::2]
    n_new = [model.config.max_seq_len - len(p) for p in timed]
    plain = [model.generate(p, n) for p, n in zip(timed, n_new, strict=True)]
    drafts = {
        TOY_DRAFTS[0]: spec.layer_cut_draft(model, 1),
        TOY_DRAFTS[1]: spec.PromptLookupDraft(max_ngram=3),
    }

    # costs: a target decode step, passes over k + 1 rows, a draft step, a lookup
    prompt = tok.encode(TOY_PROMPT)
    timers = {f"pass_{k + 1}": _pass_timer(model, prompt, k + 1) for k in (0, *TOY_KS)}
    timers["draft_step"] = _pass_timer(drafts[TOY_DRAFTS[0]], prompt, 1)
    lookup, context = drafts[TOY_DRAFTS[1]], prompt + plain[0]
    rng = np.random.default_rng(0)

    def lookup_s(n: int = 200) -> float:
        return _timed(lambda: [lookup.propose(context, 4, 0.0, rng) for _ in range(n)]) / n

    timers["lookup"] = lookup_s
    cost_samples = _interleaved_costs(timers, rounds, loads)
    cost = {name: _median(v) for name, v in cost_samples.items()}
    step = cost["pass_1"]
    c = {TOY_DRAFTS[0]: cost["draft_step"] / step, TOY_DRAFTS[1]: cost["lookup"] / step}
    v = {k: cost[f"pass_{k + 1}"] / step for k in TOY_KS}

    runs = {
        (name, k): [spec.speculative_run(model, d, p, n, k=k) for p, n in zip(timed, n_new, strict=True)]
        for name, d in drafts.items()
        for k in TOY_KS
    }
    assert all(r.tokens == plain[i] for rs in runs.values() for i, r in enumerate(rs))

    def run_all(d: Any, k: int) -> None:
        for p, n in zip(timed, n_new, strict=True):
            spec.speculative_run(model, d, p, n, k=k)

    configs: dict[str, Callable[[], Any]] = {
        "plain": lambda: [model.generate(p, n) for p, n in zip(timed, n_new, strict=True)]
    }
    for name, d in drafts.items():
        for k in TOY_KS:
            configs[f"{name}|{k}"] = lambda d=d, k=k: run_all(d, k)
    samples, cpu = _interleaved(configs, rounds, seed=1, loads=loads)
    plain_s, plain_cpu = _median(samples["plain"]), _median(cpu["plain"])
    out_drafts = {}
    for name in drafts:
        rows = []
        for k in TOY_KS:
            m = _merged(runs[name, k])
            seconds = _median(samples[f"{name}|{k}"])
            rows.append(
                {
                    "k": k,
                    "acceptance": m.acceptance_rate,
                    "kept": sum(m.accepted),
                    "proposed": sum(m.proposed),
                    "passes": m.rounds,
                    "tokens_per_pass": m.tokens_per_step,
                    "predicted": m.predicted(c[name])[1],
                    "predicted_v": m.predicted(c[name], v=v[k])[1],
                    "seconds": seconds,
                    "measured": plain_s / seconds,
                    "measured_cpu": plain_cpu / _median(cpu[f"{name}|{k}"]),
                    "samples_s": samples[f"{name}|{k}"],
                }
            )
        out_drafts[name] = rows
    return {
        "model": "toy (NumPy), 2 layers",
        "n_prompts": len(timed),
        "n_new_mean": float(np.mean(n_new)),
        "ks": list(TOY_KS),
        "cost": {"seconds": cost, "c": c, "v": {str(k): x for k, x in v.items()}},
        "plain_s": plain_s,
        "plain_samples_s": samples["plain"],
        "drafts": out_drafts,
    }


# ---------------------------------------------------------------- a memory-bound target


def record_memory_bound(
    rounds: int = 7, n_new: int = 64, loads: list[float | None] | None = None
) -> dict[str, Any]:
    """The random GPT-2-shaped target in float32 and ``CoinDraft``s on its first layer."""
    import torch

    from ..models.torch_gpt2 import TorchGPT2Model

    loads = [] if loads is None else loads
    cfg = MEMORY_BOUND_CONFIG
    target = TorchGPT2Model.random_on_device(cfg, seed=0, device="cpu", dtype=torch.float32)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, 16).tolist()
    continuation = target.generate(torch.tensor([prompt]), n_new)[0].tolist()
    reference = prompt + continuation
    cut = spec.layer_cut_draft(target, 1)

    rows_T = sorted({1, *(k + 1 for _, k in MEMORY_BOUND_SETTINGS)})
    timers = {f"pass_{t}": _pass_timer(target, prompt, t) for t in rows_T}
    timers["draft_step"] = _pass_timer(cut, prompt, 1)
    cost_samples = _interleaved_costs(timers, rounds, loads)
    cost = {name: _median(v) for name, v in cost_samples.items()}
    step = cost["pass_1"]
    c = cost["draft_step"] / step
    pass_v = {str(t): cost[f"pass_{t}"] / step for t in rows_T}

    def coin(a: float, k: int) -> spec.CoinDraft:
        return spec.CoinDraft(cut, reference, a, seed=int(100 * a) + k)

    results = {}
    for a, k in MEMORY_BOUND_SETTINGS:
        r = spec.speculative_run(target, coin(a, k), prompt, n_new, k=k)
        assert r.tokens == continuation, (a, k)
        results[a, k] = r

    configs: dict[str, Callable[[], Any]] = {
        "generate": lambda: target.generate(torch.tensor([prompt]), n_new),
        "loop_k0": lambda: spec.speculative_run(target, cut, prompt, n_new, k=0),
    }
    for a, k in MEMORY_BOUND_SETTINGS:
        configs[f"{a}|{k}"] = lambda a=a, k=k: spec.speculative_run(target, coin(a, k), prompt, n_new, k=k)
    samples, cpu = _interleaved(configs, rounds, seed=2, loads=loads)
    plain_s, plain_cpu = _median(samples["generate"]), _median(cpu["generate"])
    settings = []
    for a, k in MEMORY_BOUND_SETTINGS:
        r, v = results[a, k], pass_v[str(k + 1)]
        seconds = _median(samples[f"{a}|{k}"])
        settings.append(
            {
                "a_set": a,
                "k": k,
                "acceptance": r.acceptance_rate,
                "tokens_per_pass": r.tokens_per_step,
                "E": spec.expected_tokens_per_step(a, k),
                "formula": spec.expected_speedup(a, k, c),
                "formula_v": spec.expected_speedup(a, k, c, v),
                "predicted": r.predicted(c)[1],
                "predicted_v": r.predicted(c, v=v)[1],
                "seconds": seconds,
                "measured": plain_s / seconds,
                "measured_cpu": plain_cpu / _median(cpu[f"{a}|{k}"]),
                "samples_s": samples[f"{a}|{k}"],
            }
        )
    nbytes = int(target.nbytes)
    return {
        "model": "GPT-2 shape, random weights, float32, torch on the CPU",
        "config": {
            "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model,
            "n_heads": cfg.n_heads,
            "n_layers": cfg.n_layers,
            "d_ff": cfg.d_ff,
            "max_seq_len": cfg.max_seq_len,
            "n_params": cfg.n_params,
        },
        "dtype": "float32",
        "weights_bytes": nbytes,
        "prompt_len": len(prompt),
        "n_new": n_new,
        "draft": "CoinDraft on the target's first layer (1 of 12)",
        "step_s": step,
        "read_GBps": nbytes / step / 1e9,
        "intensity": costs.decode_cost(cfg, len(prompt), 1).intensity,
        "cost_s": cost,
        "pass_v": pass_v,
        "c": c,
        "plain_s": plain_s,
        "plain_samples_s": samples["generate"],
        "plain_cpu_s": plain_cpu,
        "loop_k0_s": _median(samples["loop_k0"]),
        "settings": settings,
    }


# ---------------------------------------------------------------- the file


def record(rounds: int = 7, toy_rounds: int = 7) -> dict[str, Any]:
    """Both settings, timed on this machine with one torch thread -> the file's dict."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        hardware = hardware_info("cpu")
        loads: list[float | None] = []
        start = time.perf_counter()
        toy = record_toy(toy_rounds, loads)
        memory_bound = record_memory_bound(rounds, loads=loads)
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    known = [x for x in loads if x is not None]
    return {
        "schema": 1,
        "command": COMMAND,
        "date": hardware["date"],
        "machine": describe(hardware),
        "hardware": hardware,
        "versions": versions(),
        "torch_threads": 1,
        "rounds": {"toy": toy_rounds, "memory_bound": rounds},
        "seconds": seconds,
        "load_average": {
            "start": hardware["load_average_1m"],
            "end": load_average(),
            "rounds": loads,
            "median": _median(known) if known else None,
            "max": max(known) if known else None,
        },
        "toy": toy,
        "memory_bound": memory_bound,
        "recorded_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def check(run: Any, where: str = FILE) -> dict[str, Any]:
    """``run`` if it holds every key the chapter reads, else a ValueError naming what is missing."""
    if not isinstance(run, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(run).__name__}")
    parts = [("top", run), ("toy", run.get("toy")), ("memory_bound", run.get("memory_bound"))]
    parts += [("setting", s) for s in (run.get("memory_bound") or {}).get("settings", [])]
    for part, obj in parts:
        missing = [k for k in KEYS[part] if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise ValueError(f"{where}: {part} lacks {missing}")
    if not run["memory_bound"]["settings"]:
        raise ValueError(f"{where}: memory_bound has no settings")
    return run


def load(name: str = FILE) -> dict[str, Any]:
    """The recorded run (``kvtutor/data/runs/speculative-cpu.json``, read through
    ``importlib.resources``), checked for the keys the chapter reads."""
    run = recorded.run_json(name)
    if run is None:
        raise FileNotFoundError(f"{recorded.RUNS}/{name} is missing: re-record it with `{COMMAND}`")
    return check(run, f"{recorded.RUNS}/{name}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvtutor.bench.speculative", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds, memory-bound model")
    parser.add_argument("--toy-rounds", type=int, default=7, help="interleaved rounds, toy model")
    args = parser.parse_args(argv)
    for name in ("rounds", "toy_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(args, name)}")
    try:  # before anything is measured
        check_output_path(args.out, "--out")
    except ValueError as exc:
        parser.error(str(exc))
    run = check(record(args.rounds, args.toy_rounds))
    text = json.dumps(finite(run), indent=1, allow_nan=False) + "\n"  # strict JSON: nan as null
    write_atomically(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    mb = run["memory_bound"]
    print(
        f"{run['machine']}, load {run['load_average']['median']}:"
        f" step {mb['step_s'] * 1e3:.1f} ms, c {mb['c']:.3f}"
    )
    for s in mb["settings"]:
        print(
            f"  a {s['a_set']:.1f} k {s['k']}: acceptance {s['acceptance']:.2f}, formula {s['formula']:.2f},"
            f" with v {s['formula_v']:.2f}, measured {s['measured']:.2f}"
        )
    for name, rows in run["toy"]["drafts"].items():
        print(f"  toy {name}: measured {[round(r['measured'], 2) for r in rows]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
