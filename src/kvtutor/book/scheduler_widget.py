"""The scheduler replay for the page of "Continuous batching": the package's own scheduler
(``serving.loop.run_serving``) run over two small traces when the book is built, every step
exported, and ``book/_static/widgets/kv-scheduler.js`` to step or play it in the page.

The two traces: the five requests of the toy model on two slots (static and continuous batching),
and a 768-token prompt arriving among five short requests on eight slots (static batching, and
continuous batching with a whole prefill or chunked at 32 or 16 tokens a step). For each run and
step the export holds what ran (each request's state, the prompt tokens of its chunk or its decode
token, the positions in its cache, the tokens it has given), the step's counts as its
``StepRecord`` holds them, and each request's TTFT and TPOT as they accumulate, in steps and, for
the long trace, in milliseconds of ``serving.disagg.StepModel``'s roofline model of the chapter's
GPT-2 of width 256 on the recorded CPU (the clock the chapter uses for that trace). The JavaScript
only lays them out.

The output is the same on every run and every CPU: the schedule depends only on the requests'
lengths, never on the random model's tokens (which are not exported), and times are rounded to
the printed digits. ``kvtutor.book.paged_widget`` does the same for the paged pool
(``simulate_trace``); ``tests/test_widgets.py`` checks both exports against the package run
directly.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..measure import recorded
from ..models.config import GPT2Config
from ..models.gpt2 import GPT2Model
from ..models.toy import load_toy_model, load_toy_tokenizer
from ..serving.disagg import StepModel
from ..serving.loop import ServingTrace, latency_summary, run_serving, step_durations, token_times
from ..validate import check_choice
from .editions import both_editions
from .widgets import VERSION, Widget

__all__ = [
    "STATES",
    "LONG_CONFIG",
    "RUNNER_CONFIG",
    "serving_replay",
    "serving_replay_data",
    "serving_runs",
    "serving_cells",
    "timeline_svg",
    "check_timeline",
]

#: What a request does in a step, by its code in the export (``serving_cells``).
STATES = ("future", "waiting", "slot", "chunk", "first", "decode", "held", "left")
#: The model the long trace's clock times: the chapter's GPT-2 of width 256 with 1,024 positions.
LONG_CONFIG = GPT2Config(vocab_size=2048, d_model=256, n_heads=4, n_layers=4, max_seq_len=1024)
#: The model that runs the long trace's tokens: a schedule depends only on the requests' lengths,
#: so a narrow random model of the same positions and vocabulary gives the same steps, faster.
RUNNER_CONFIG = GPT2Config(vocab_size=2048, d_model=8, n_heads=2, n_layers=1, max_seq_len=1024)
N_SHORT, SHORT_PROMPT, SHORT_NEW, LONG_PROMPT, LONG_NEW, LONG_ARRIVAL = 5, 8, 48, 768, 8, 8
BUDGETS = (None, 32, 16)
MS_DIGITS = 2


def _toy_requests() -> list[tuple[int, list[int], int]]:
    tok = load_toy_tokenizer()
    texts = [(0, "The cat sat", 6), (0, "The dog", 2), (1, "A bird", 3), (2, "It was", 4), (3, "The sun", 2)]
    return [(arrival, tok.encode(text), n) for arrival, text, n in texts]


def _long_requests() -> list[tuple[int, list[int], int]]:
    rng = np.random.default_rng(2)
    vocab = LONG_CONFIG.vocab_size
    short = [(i, rng.integers(0, vocab, SHORT_PROMPT).tolist(), SHORT_NEW) for i in range(N_SHORT)]
    return short + [(LONG_ARRIVAL, rng.integers(0, vocab, LONG_PROMPT).tolist(), LONG_NEW)]


def serving_runs() -> list[dict[str, Any]]:
    """The exported runs, each the arguments of one ``run_serving`` call: ``trace`` (its id),
    ``model``, ``requests``, ``max_batch_size``, ``policy``, ``max_step_tokens`` and ``clock``
    (StepRecord -> seconds, or None for steps only). The same list every call."""
    toy = load_toy_model()
    long_model = GPT2Model.random(RUNNER_CONFIG, seed=2)
    ceilings = recorded.cpu_bench()["ceilings"]
    step_model = StepModel(
        config=LONG_CONFIG,
        peak_flops=ceilings["peak_flops"],
        bandwidth=ceilings["bandwidth"],
        dtype="float32",
    )

    def clock(s: Any) -> float:
        """Roofline seconds of one step's prompt chunks and decodes."""
        return step_model.step_s(s.chunks, s.contexts)

    runs = [
        {"trace": "toy", "model": toy, "requests": _toy_requests(), "max_batch_size": 2, "policy": p,
         "max_step_tokens": None, "clock": None}
        for p in ("static", "continuous")
    ]  # fmt: skip
    runs.append({"trace": "long", "model": long_model, "requests": _long_requests(), "max_batch_size": 8,
                 "policy": "static", "max_step_tokens": None, "clock": clock})  # fmt: skip
    for budget in BUDGETS:
        runs.append({**runs[-1], "policy": "continuous", "max_step_tokens": budget})
    return runs


def _leave_steps(trace: ServingTrace) -> list[int]:
    """The step after which each request's slot is free: its last token (continuous), or its
    batch's last token (static: a batch, admitted into an empty engine in one step, keeps its
    slots until its longest request is done)."""
    if trace.policy == "continuous":
        return [r.finish_step for r in trace.requests]
    batch_end: dict[int, int] = {}
    for r in trace.requests:
        batch_end[r.start_step] = max(batch_end.get(r.start_step, -1), r.finish_step)
    return [batch_end[r.start_step] for r in trace.requests]


def serving_cells(trace: ServingTrace) -> list[list[list[int]]]:
    """[steps][requests] of [state, tokens run, positions cached, tokens given, slot]: what each
    request did in each step of ``trace``, read off its RequestRecord (``STATES`` names the state
    codes; slot -1 when it holds none). Positions cached count after the step: the prompt tokens
    run so far, and one per decode step (the newest token is not in the cache yet); 0 once the
    request has left its slot."""
    if not isinstance(trace, ServingTrace):
        raise TypeError(f"trace: expected a ServingTrace (run_serving's), got {type(trace).__name__}")
    leave = _leave_steps(trace)
    out = []
    for s in trace.steps:
        row = []
        for r, left in zip(trace.requests, leave, strict=True):
            chunks = [(step, n) for step, n in r.chunks if step <= s.step]
            prefilled = sum(n for _, n in chunks)
            given = min(s.step, r.finish_step) - r.admit_step + 1 if 0 <= r.admit_step <= s.step else 0
            cached = prefilled + max(0, given - 1)
            if not r.max_new_tokens:  # done on arrival, never in a slot
                state = STATES.index("future" if s.step < r.arrival_step else "left")
                row.append([state, 0, 0, 0, -1])
                continue
            run = chunks[-1][1] if chunks and chunks[-1][0] == s.step else 0
            if s.step < r.arrival_step:
                state = "future"
            elif s.step < r.start_step:
                state = "waiting"
            elif r.admit_step == s.step:
                state = "first"
            elif run:
                state = "chunk"
            elif r.admit_step < 0 or s.step < r.admit_step:
                state = "slot"  # in a slot, but no room for its prompt in this step's budget
            elif s.step <= r.finish_step:
                state, run = "decode", 1
            else:
                state = "held" if s.step <= left else "left"
            slot = r.slot if r.start_step <= s.step <= left else -1
            row.append(
                [STATES.index(state), run, cached if state not in ("future", "left") else 0, given, slot]
            )
        out.append(row)
    return out


def _ms(seconds: float) -> float:
    return round(float(seconds) * 1e3, MS_DIGITS)


def _latency(trace: ServingTrace, clock: Callable | None, cells: list) -> list[dict[str, Any]]:
    """Per request: TTFT, and TPOT after each of its tokens from the second on (the mean gap since
    the first), in steps and (with a clock) in ms; the last TPOT is ``latency_summary``'s."""
    summary = latency_summary(trace, clock)
    times = token_times(trace, clock) if clock is not None else [None] * len(trace.requests)
    steps = [s.step for s in trace.steps]
    out = []
    for i, (r, lat, t) in enumerate(zip(trace.requests, summary.requests, times, strict=True)):
        n = len(r.tokens)
        # the steps that gave this request a token
        given = [step for step, row, before in zip(steps, cells, [None, *cells], strict=False)
                 if row[i][3] > (before[i][3] if before else 0)]  # fmt: skip
        entry: dict[str, Any] = {
            "ttft_steps": int(lat.ttft_steps) if n else None,
            "tpot_steps": [round((given[k] - given[0]) / k, 2) for k in range(1, n)],
        }
        if t is not None:
            entry["ttft_ms"] = _ms(lat.ttft_s) if n else None
            entry["tpot_ms"] = [_ms((t[k] - t[0]) / k) for k in range(1, n)]
        out.append(entry)
    return out


def _run_data(run: dict[str, Any]) -> dict[str, Any]:
    trace = run_serving(run["model"], run["requests"], run["max_batch_size"], run["policy"],
                        run["max_step_tokens"])  # fmt: skip
    clock = run["clock"]
    seconds = step_durations(trace, clock) if clock is not None else None
    steps = []
    for i, s in enumerate(trace.steps):
        entry = {"step": s.step, "held": s.held, "first": s.prefilled, "decoded": s.decoded,
                 "prompt": s.prompt_tokens, "run": s.batched_tokens, "given": s.tokens}  # fmt: skip
        if seconds is not None:
            entry["ms"] = _ms(seconds[i])
            entry["elapsed_ms"] = _ms(seconds[: i + 1].sum())
        steps.append(entry)
    summary, cells = latency_summary(trace, clock), serving_cells(trace)
    p = summary.percentiles
    totals = {
        "n_steps": trace.n_steps,
        "n_tokens": trace.n_tokens,
        "tokens_per_step": round(trace.tokens_per_step, 2),
        "ttft_steps_p50": round(p["ttft_steps"][50], 2),
        "ttft_steps_p90": round(p["ttft_steps"][90], 2),
    }
    if clock is not None:
        totals.update(
            seconds_ms=_ms(summary.seconds),
            ttft_ms_p90=_ms(p["ttft_s"][90]),
            tpot_ms_p50=_ms(p["tpot_s"][50]),
            max_gap_ms_p99=_ms(p["max_gap_s"][99]),
        )
    return {
        "id": "-".join([run["trace"], run["policy"], str(run["max_step_tokens"] or "whole")]),
        "trace": run["trace"], "policy": run["policy"], "budget": run["max_step_tokens"],
        "steps": steps, "cells": cells, "latency": _latency(trace, clock, cells), "totals": totals,
    }  # fmt: skip


def _trace_info(run: dict[str, Any]) -> dict[str, Any]:
    names = [chr(ord("A") + i) for i in range(len(run["requests"]))]
    requests = [{"name": name, "arrival": a, "prompt": len(p), "wants": n}
                for name, (a, p, n) in zip(names, run["requests"], strict=True)]  # fmt: skip
    info: dict[str, Any] = {"id": run["trace"], "slots": run["max_batch_size"], "requests": requests}
    if run["trace"] == "toy":
        tok = load_toy_tokenizer()
        for req, (_, prompt, n) in zip(requests, run["requests"], strict=True):
            req["text"] = tok.decode(prompt)
            req["words"] = [tok.vocab[t] for t in run["model"].generate(prompt, n)]
    else:
        cpu, cfg = recorded.cpu_bench(), LONG_CONFIG
        info["clock"] = {"cpu": cpu["hardware"]["cpu"], "date": cpu["date"][:10], "d_model": cfg.d_model,
                         "n_layers": cfg.n_layers, "dtype": "float32"}  # fmt: skip
    return info


def serving_replay_data() -> dict[str, Any]:
    """The replay's data: the traces (requests, slots, the clock) and, per run, every step's counts
    (``StepRecord``), every request's state (``serving_cells``), TTFT and TPOT as they accumulate
    (``latency_summary``, ``token_times``) and the run's totals."""
    runs = serving_runs()
    traces = {run["trace"]: _trace_info(run) for run in runs}
    return {"widget": "serving-replay", "version": VERSION, "states": list(STATES),
            "traces": list(traces.values()), "runs": [_run_data(run) for run in runs]}  # fmt: skip


# ---------------------------------------------------------------- the figure without JavaScript

#: Fill of each state in the figure (and in the page: kv-widgets.css uses the same colours)
FILLS = {"waiting": "#d0d7de", "slot": "#eac54f", "chunk": "#8fd19e", "first": "#2ea043",
         "decode": "#0a7d91", "held": "#f5b7b1", "running": "#0a7d91", "admitted": "#2ea043",
         "preempted": "#cf222e", "finished": "#8250df"}  # fmt: skip
FIGURE_WORDS = {
    "en": {"step": "step", "waiting": "waiting for a slot", "slot": "in a slot, no budget left",
           "chunk": "prompt chunk", "first": "prefill: first token", "decode": "decode",
           "held": "done, slot still held", "running": "running", "admitted": "prefill",
           "preempted": "preempted", "finished": "last token"},
    "zh": {"step": "步", "waiting": "等待空位", "slot": "占着空位，本步预算已用完", "chunk": "提示词分块",
           "first": "预填充：第一个词元", "decode": "解码", "held": "已完成，仍占着空位", "running": "运行中",
           "admitted": "预填充", "preempted": "被抢占", "finished": "最后一个词元"},
}  # fmt: skip


def timeline_svg(rows: Sequence[Sequence[str | None]], names: Sequence[str], steps: Sequence[int],
                 lang: str, title: str) -> str:  # fmt: skip
    """A static figure of one run: one row per request, one column per step, each cell filled by
    the request's state in that step (None: not there), with a legend of the states it uses.
    The arguments are checked first (``check_timeline``)."""
    check_timeline(rows, names, steps, lang, title)
    words = FIGURE_WORDS[lang]
    cell, left, top = 12, 28, 34
    width, height = left + cell * len(steps) + 8, top + cell * len(names) + 44
    parts = [f'<text x="0" y="14" font-size="12" font-weight="600">{html.escape(title)}</text>']
    for j, step in enumerate(steps):
        if j % 5 == 0:
            parts.append(f'<text x="{left + j * cell}" y="{top - 4}" font-size="9">{step}</text>')
    used = []
    for i, name in enumerate(names):
        y = top + i * cell
        parts.append(f'<text x="4" y="{y + 10}" font-size="10">{html.escape(name)}</text>')
        for j, state in enumerate(rows[i]):
            if state is None:
                continue
            used.append(state)
            parts.append(
                f'<rect x="{left + j * cell}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                f'fill="{FILLS[state]}"><title>{html.escape(words[state])}</title></rect>'
            )
    x, y = 4, top + cell * len(names) + 16
    parts.append(f'<text x="{left}" y="{y}" font-size="9">{words["step"]} \u2192</text>')
    y += 14
    for state in dict.fromkeys(s for s in FILLS if s in used):
        label = html.escape(words[state])
        parts.append(f'<rect x="{x}" y="{y - 9}" width="9" height="9" fill="{FILLS[state]}"/>'
                     f'<text x="{x + 12}" y="{y}" font-size="9">{label}</text>')  # fmt: skip
        x += 24 + 6 * len(words[state]) * (2 if lang == "zh" else 1)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {max(width, x)} {height}" '
        f'style="max-width: 100%; height: auto" font-family="sans-serif" fill="#222832">'
        f"<title>{html.escape(title)}</title>{''.join(parts)}</svg>"
    )


#: The most cells (requests x steps) a timeline draws: each is a few hundred bytes of SVG.
MAX_TIMELINE_CELLS = 2**16


def check_timeline(rows: Any, names: Any, steps: Any, lang: Any, title: Any) -> None:
    """``timeline_svg``'s arguments, or a TypeError/ValueError naming the first that is wrong, before
    any SVG is built: ``lang`` one of FIGURE_WORDS's, ``title`` a string, ``names`` and ``steps``
    sequences of at most MAX_TIMELINE_CELLS cells together, and one row per name (a missing row is
    named), each with one cell per step, each cell None or a state of FILLS."""
    check_choice("lang", lang, tuple(FIGURE_WORDS))
    if not isinstance(title, str):
        raise TypeError(f"title: expected a string, got {type(title).__name__}")
    for name, value in (("names", names), ("steps", steps), ("rows", rows)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name}: expected a sequence, got {type(value).__name__}")
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"names: expected strings, got {[type(n).__name__ for n in names]}")
    if len(names) * len(steps) > MAX_TIMELINE_CELLS:
        raise ValueError(f"steps: expected at most {MAX_TIMELINE_CELLS} cells in all, got {len(names)} "
                         f"names x {len(steps)} steps")  # fmt: skip
    if len(rows) != len(names):
        missing = [repr(n) for n in names[len(rows) :]]
        what = f"no row for {', '.join(missing)}" if missing else f"{len(rows) - len(names)} rows too many"
        raise ValueError(f"rows: expected one row per name ({len(names)}), got {len(rows)}: {what}")
    for name, row in zip(names, rows, strict=True):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) != len(steps):
            got = f"{len(row)} cells" if isinstance(row, Sequence) else type(row).__name__
            raise ValueError(
                f"rows: the row of {name!r}: expected one cell per step ({len(steps)}), got {got}"
            )
        for step, state in zip(steps, row, strict=True):
            if state is not None and state not in FILLS:
                raise ValueError(f"rows: the row of {name!r}, step {step}: expected None or one of "
                                 f"{list(FILLS)}, got {state!r}")  # fmt: skip


FALLBACK = {
    "en": (
        "Without JavaScript the replay cannot run: it steps through the package's scheduler "
        "(run_serving) on two traces, static against continuous batching and chunked prefill, "
        "showing each step's slots, the tokens it ran, the positions each request has cached, "
        "and TTFT and TPOT as they accumulate. Here is one of its runs:",
        "Continuous batching of the {n} toy requests on {slots} slots",
    ),
    "zh": (
        "没有 JavaScript，回放无法运行：它逐步展示本包的调度器（run_serving）在两条请求轨迹上的运行，"
        "比较静态批处理与连续批处理以及分块预填充，显示每一步的空位、运行的词元数、每个请求缓存的位置数，"
        "以及逐步累积的 TTFT 和 TPOT。下面是其中一次运行：",
        "玩具模型的 {n} 个请求在 {slots} 个空位上连续批处理",
    ),
}


def _fallback(data: dict[str, Any]) -> str:
    run = next(r for r in data["runs"] if r["id"] == "toy-continuous-whole")
    trace = next(t for t in data["traces"] if t["id"] == "toy")
    names = [r["name"] for r in trace["requests"]]
    rows = [[None if STATES[row[i][0]] in ("future", "left") else STATES[row[i][0]] for row in run["cells"]]
            for i in range(len(names))]  # fmt: skip
    steps = [s["step"] for s in run["steps"]]
    parts = {}
    for lang, (note, title) in FALLBACK.items():
        figure = timeline_svg(rows, names, steps, lang, title.format(n=len(names), slots=trace["slots"]))
        parts[lang] = f"<p>{html.escape(note)}</p>{figure}"
    return both_editions(parts["en"], parts["zh"])


def serving_replay() -> Widget:
    """The scheduler replay, for the page of "Continuous batching" (``serving_replay_data``)."""
    data = serving_replay_data()
    counts = Counter(run["trace"] for run in data["runs"])
    summary = f"scheduler replay: {len(data['runs'])} runs of {len(counts)} traces"
    return Widget("serving-replay", data, summary, fallback=_fallback(data))
