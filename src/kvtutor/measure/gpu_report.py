"""Reading a recorded GPU run: the profiler's kernel table, GPU time by kind of work, the anchor
configurations against the bandwidth floor, and the GPU goals still to be measured.

Nothing here measures anything or needs a GPU: every function reads the text and JSON that the
anchor script (``gpu_anchors.py.txt`` beside the run) and ``python -m kvtutor bench --device cuda``
wrote (see ``kvtutor.measure.recorded.h200_run()``), so the "Decode on a GPU" chapter runs on any machine.
The chapter's figures are in ``kvtutor.plots.gpu``.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..text import TEXT_WIDTH
from . import goals as _goals

__all__ = [
    "CATEGORIES",
    "ProfileRow",
    "KernelTable",
    "parse_time_us",
    "parse_kernel_table",
    "category",
    "plain_words",
    "fixed_cost_fit",
    "Anchor",
    "anchors",
    "recording",
    "GpuGoal",
    "GPU_GOALS",
    "GOAL_IDS",
    "value_at_recording",
    "goal_table",
    "goal_list",
]

# ---------------------------------------------------------------- the profiler's kernel table

_TIME = re.compile(r"^(-?[0-9]+(?:\.[0-9]*)?)\s*(ns|us|µs|ms|s)$")
_US_PER = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_TOTAL = re.compile(r"^Self (\w+) time total:\s*(\S+)\s*$")


def parse_time_us(text: str) -> float:
    """'3.288ms', '762.524us', '1.2s', '5ns' -> microseconds."""
    match = _TIME.match(text.strip())
    if match is None:
        raise ValueError(f"text: expected a time such as '3.288ms' or '762.524us', got {text!r}")
    return float(match.group(1)) * _US_PER[match.group(2)]


@dataclass(frozen=True)
class ProfileRow:
    """One row of ``torch.profiler``'s ``key_averages().table()``; times in microseconds, summed over
    every call. The device columns are 0 in a table profiled without a device."""

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float = 0.0
    device_total_us: float = 0.0

    @property
    def is_kernel(self) -> bool:
        """Work the device ran (a kernel, a memcpy) rather than a host-side operator or runtime call:
        device time and no host time at all."""
        return self.self_device_us > 0 and self.cpu_total_us == 0

    @property
    def launches_work(self) -> bool:
        """A host-side operator that put work on the device itself (its self device time)."""
        return self.self_device_us > 0 and not self.is_kernel


@dataclass(frozen=True)
class KernelTable:
    """A parsed profiler table: its rows (the table's top rows only, as printed) and its totals."""

    rows: tuple[ProfileRow, ...]
    self_cpu_total_us: float
    self_device_total_us: float = 0.0

    def row(self, name: str) -> ProfileRow:
        """The row called ``name`` (KeyError when the table does not list it)."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"name: no row {name!r} in the table")

    @property
    def kernels(self) -> tuple[ProfileRow, ...]:
        """The rows that are work the device ran (``ProfileRow.is_kernel``)."""
        return tuple(r for r in self.rows if r.is_kernel)

    def kernel_launches(self) -> int:
        """How many times the kernels the table lists ran: a lower bound on all launches, since
        the table shows its top rows only."""
        return sum(r.calls for r in self.kernels)

    def device_time_by_category(self) -> dict[str, float]:
        """Device microseconds per category (``CATEGORIES`` order), from the self device time of the
        host operators that launched the work, each time counted once. "other" is the rest of the
        total: operators the categories do not name and rows the table leaves out."""
        out = dict.fromkeys(CATEGORIES, 0.0)
        for r in self.rows:
            if r.launches_work:
                out[category(r.name)] += r.self_device_us
        named = sum(v for k, v in out.items() if k != "other")
        if named > self.self_device_total_us * 1.001:
            raise ValueError(
                f"table: its operators' self device time ({named:.1f} us) exceeds the total "
                f"({self.self_device_total_us:.1f} us)"
            )
        out["other"] = max(self.self_device_total_us - named, 0.0)
        return out


def _is_rule(line: str) -> bool:
    return bool(line.strip()) and set(line.strip()) <= {"-", " "}


_COLUMNS = {  # header -> field; the device columns are called CUDA (older torch) or Device
    "Name": "name",
    "# of Calls": "calls",
    "Self CPU": "self_cpu_us",
    "CPU total": "cpu_total_us",
    "Self CUDA": "self_device_us",
    "Self Device": "self_device_us",
    "CUDA total": "device_total_us",
    "Device Total": "device_total_us",
    "Device total": "device_total_us",
}


def parse_kernel_table(text: str) -> KernelTable:
    """The text of ``prof.key_averages().table(...)`` -> ``KernelTable``.

    The header's names are separated by two or more spaces; in a row every cell after the name is
    one word, so the name is what is left of the line (``void at::native::(anonymous
    namespace)::...`` stays whole).
    """
    if not isinstance(text, str):
        raise ValueError(f"text: expected the profiler table as a string, got {type(text).__name__}")
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if _is_rule(line)]
    if len(rules) < 3 or rules[1] != rules[0] + 2:
        raise ValueError("text: expected a profiler table (a rule of dashes, a header, a rule, rows, a rule)")
    header = re.split(r"\s{2,}", lines[rules[0] + 1].strip())
    fields = {_COLUMNS[h]: j for j, h in enumerate(header) if h in _COLUMNS}
    for need in ("name", "calls", "self_cpu_us", "cpu_total_us"):
        if need not in fields:
            raise ValueError(f"text: the table has no column for {need!r} (header {header})")
    rows = []
    for line in lines[rules[1] + 1 : rules[2]]:
        cells = line.strip().rsplit(None, len(header) - 1)
        if len(cells) != len(header):
            raise ValueError(f"text: expected {len(header)} cells in the row {line.strip()!r}")
        values: dict[str, Any] = {}
        for field, j in fields.items():
            cell = cells[j]
            if field == "name":
                values[field] = cell
            elif field == "calls":
                values[field] = int(cell)
            else:
                values[field] = parse_time_us(cell)
        rows.append(ProfileRow(**values))
    totals = {}
    for line in lines[rules[2] + 1 :]:
        match = _TOTAL.match(line.strip())
        if match:
            totals[match.group(1)] = parse_time_us(match.group(2))
    if "CPU" not in totals:
        raise ValueError("text: expected a 'Self CPU time total:' line after the table")
    device = next((v for k, v in totals.items() if k != "CPU"), 0.0)
    return KernelTable(tuple(rows), totals["CPU"], device)


# ---------------------------------------------------------------- kinds of work

#: the kinds of work the chapter splits a decode step's device time into
CATEGORIES = ("matrix products", "attention", "LayerNorm", "masks", "cache writes", "other")

_PATTERNS = (  # first match wins: attention before products (cuDNN's attention names say "wmma")
    ("attention", r"attention|sdpa|flash|fmha"),
    ("matrix products", r"aten::(?:add|baddb|b)?mm\b|aten::(?:add)?mv\b|aten::linear|aten::matmul|gemm|gemv"),
    ("matrix products", r"nvjet|cutlass|cublas|xmma"),  # kernels: cuBLAS's and CUTLASS's names
    ("LayerNorm", r"layer_?norm"),
    ("masks", r"aten::where|masked_fill"),
    ("cache writes", r"index_copy"),
)


def category(name: str) -> str:
    """The ``CATEGORIES`` entry of an operator's or kernel's name ("other" when none fits)."""
    lowered = name.lower()
    for cat, pattern in _PATTERNS:
        if re.search(pattern, lowered):
            return cat
    return "other"


#: What a row of the table does, in plain words: (pattern of its name, words), first match wins.
#: A PyTorch operator (``aten::...``) runs on the host and launches kernels, which run on the GPU.
_PLAIN = (
    (r"^aten::linear$", "weight product (PyTorch's call)"),
    (r"^aten::addmm$", "weight product, plus its bias"),
    (r"^aten::(?:matmul|mm)$", "LM head: one row times the vocabulary"),
    (r"^nvjet.*splitk", "weight product, split into partial sums"),
    (r"^(?:nvjet|cutlass|ampere|sm\d+_xmma|gemm)", "weight product, on the GPU"),
    (r"^aten::scaled_dot_product_attention$", "attention (PyTorch's call)"),
    (r"^aten::_scaled_dot_product_\w*attention$", "attention, handed to cuDNN"),
    (r"^aten::_cudnn_attention_forward$", "attention, cuDNN's own"),
    (r"^cudnn|sdpa|flash|fmha", "attention, on the GPU"),
    (r"^aten::layer_norm$", "LayerNorm (PyTorch's call)"),
    (r"^aten::native_layer_norm$", "LayerNorm"),
    (r"layer_norm", "LayerNorm, on the GPU"),
    (r"^aten::where$", "mask: a score, or minus infinity"),
    (r"^aten::index_copy_$", "write the new key or value row"),
    (r"index_elementwise_kernel", "write a row, on the GPU"),
    (r"elementwise_kernel", "mask, on the GPU"),
)


def plain_words(row: ProfileRow) -> str:
    """What a row of the profiler's table does, in words a reader knows ("weight product, on the
    GPU" for cuBLAS's ``nvjet_sm90_...`` kernels); its category and where it runs when no finer
    description fits."""
    if not isinstance(row, ProfileRow):
        raise TypeError(f"row: expected a ProfileRow (KernelTable.rows), got {type(row).__name__}")
    lowered = row.name.lower()
    for pattern, words in _PLAIN:
        if re.search(pattern, lowered):
            return words
    return f"{category(row.name)}, {'on the GPU' if row.is_kernel else 'PyTorch operator'}"


def fixed_cost_fit(points: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """[(kernels, bytes, seconds), ...] (at least two) -> (seconds per kernel, bytes per second).

    The least-squares fit of ``seconds = kernels * c + bytes / b``: a fixed cost c that each kernel
    pays (its ramp-up and tail) on top of streaming its bytes at one bandwidth b. With two points
    it is the exact solution of two equations.
    """
    pts = np.array(list(points), dtype=float)
    if pts.ndim != 2 or pts.shape[1] != 3 or pts.shape[0] < 2:
        raise ValueError("points: expected at least two (kernels, bytes, seconds) triples")
    a = pts[:, :2]
    if np.linalg.matrix_rank(a) < 2:
        raise ValueError("points: the (kernels, bytes) pairs must not be proportional")
    (c, inv_b), *_ = np.linalg.lstsq(a, pts[:, 2], rcond=None)
    if inv_b <= 0:
        raise ValueError("points: the fit gives no positive bandwidth")
    return float(c), float(1.0 / inv_b)


# ---------------------------------------------------------------- the anchor configurations


@dataclass(frozen=True)
class Anchor:
    """One configuration of the anchor run: seconds per token, and the weight bytes it reads."""

    label: str
    model: str
    s_per_token: float
    weight_bytes: int
    copy_bw: float

    @property
    def tok_per_s(self) -> float:
        return 1.0 / self.s_per_token

    @property
    def fraction_of_copy(self) -> float:
        """Weight bytes per second over the copy bandwidth (bytes read plus written)."""
        return self.weight_bytes / self.s_per_token / self.copy_bw

    @property
    def floor_s(self) -> float:
        """The least time a step could take: every weight byte once, at copy bandwidth."""
        return self.weight_bytes / self.copy_bw


# (section of anchors.json, its time key, label, model, whose weight bytes)
_ANCHORS = (
    ("gemv_chain_1.3b", "graph_s", "products alone, CUDA graph", "1.3B", "own"),
    ("gemv_chain_1.3b", "eager_s", "products alone, eager", "1.3B", "own"),
    ("ours_compile_mode", "s_per_token", "kvtutor compile, capacity 32", "1.3B", "model"),
    ("ours_graph_cap32", "s_per_token", "kvtutor graph, capacity 32", "1.3B", "model"),
    ("ours_graph_loop_64", "s_per_token", "kvtutor graph, 64-token loop", "1.3B", "model"),
    ("ours_graph_cap4096", "s_per_token", "kvtutor graph, capacity 4096", "1.3B", "model"),
    ("hf_static_compiled_generate", "s_per_token", "transformers static+compile", "1.3B", "model"),
    ("ours_generate_default", "s_per_token", "kvtutor generate, eager", "1.3B", "model"),
    ("hf_eager_generate", "s_per_token", "transformers eager", "1.3B", "model"),
    ("gemv_chain_6.7b", "graph_s", "products alone, CUDA graph", "6.7B", "own"),
)


def anchors(
    anchor_json: Mapping[str, Any], model: str | None = None, copy_bw: float | None = None
) -> list[Anchor]:
    """The anchor script's JSON -> its configurations, fastest first (only ``model``'s, "1.3B" or
    "6.7B", when given). Sections the run skipped or failed are left out. Fractions are of
    ``copy_bw`` (bytes per second; by default the script's own copy, ``anchor_json["copy_bw"]``):
    the book passes ``recorded.h200_copy_bandwidth()``, the one H200 bandwidth it quotes."""
    if copy_bw is None:
        copy_bw = float(anchor_json["copy_bw"]["bytes_rw_per_s"])
    elif isinstance(copy_bw, bool) or not isinstance(copy_bw, (int, float)) or not copy_bw > 0:
        raise ValueError(f"copy_bw: expected bytes per second > 0, got {copy_bw!r}")
    model_bytes = int(anchor_json["model"]["weight_bytes"])
    out = []
    for section, key, label, size, whose in _ANCHORS:
        entry = anchor_json.get(section)
        if model is not None and size != model:
            continue
        if not isinstance(entry, Mapping) or not isinstance(entry.get(key), (int, float)):
            continue
        nbytes = int(entry["weight_bytes"]) if whose == "own" else model_bytes
        out.append(Anchor(label, size, float(entry[key]), nbytes, copy_bw))
    return sorted(out, key=lambda a: a.s_per_token)


def recording(run: Mapping[str, Any], readme: str = "") -> dict[str, str]:
    """``recorded.h200_run()`` (and its README's text, for the driver) -> what was recorded where:
    gpu, driver, cuda, torch, transformers, commit, date."""
    hw = run["bench"]["hardware"]
    driver = re.search(r"driver ([0-9.]+)", readme)
    return {
        "gpu": str(hw.get("gpu", run["anchors"].get("device", "?"))),
        "driver": driver.group(1) if driver else "?",
        "cuda": str(hw.get("cuda", "?")),
        "torch": str(run["anchors"].get("torch", run["bench"]["versions"].get("torch", "?"))),
        "transformers": str(run["bench"]["versions"].get("transformers", "?")),
        "commit": str(run["commit"]),
        "date": str(run["date"]),
    }


# ---------------------------------------------------------------- the goals of issue #11


@dataclass(frozen=True)
class GpuGoal:
    """One GPU goal: the bench entry ``id`` that will report it, what it asks, and its target."""

    id: str
    what: str
    target: float


#: the GPU goals of the benchmark (``kvtutor.bench.GPU_GOALS``, the one place they are written)
GPU_GOALS = tuple(GpuGoal(gid, what, target) for gid, (what, target) in _goals.GPU_GOALS.items())
#: the ids of ``GPU_GOALS``, in order
GOAL_IDS = tuple(g.id for g in GPU_GOALS)


def _bench_goal(bench: Mapping[str, Any] | None, goal_id: str) -> Mapping[str, Any] | None:
    if not isinstance(bench, Mapping):
        return None
    return next((g for g in bench.get("goals", []) if g.get("id") == goal_id), None)


def value_at_recording(goal_id: str, run: Mapping[str, Any]) -> tuple[float | None, str]:
    """What the recorded run (``recorded.h200_run()``) says about a goal: (value or None, how it
    was obtained)."""
    a, bench = run["anchors"], run["bench"]

    def s(section: str, key: str = "s_per_token") -> float | None:
        entry = a.get(section)
        return float(entry[key]) if isinstance(entry, Mapping) and key in entry else None

    if goal_id == "gpu_decode_vs_products":
        products, step = s("gemv_chain_1.3b", "graph_s"), s("ours_graph_cap4096")
        if products is None or step is None:
            return None, "not measured"
        return products / step, "graph step at capacity 4096"
    if goal_id == "gpu_generate_vs_hf_static":
        hf, ours = s("hf_static_compiled_generate"), s("ours_graph_loop_64")
        if hf is None or ours is None:
            return None, "not measured"
        return hf / ours, "a hand-written graph loop, not generate"
    if goal_id == "gpu_prefill_matmul":
        g = _bench_goal(bench, "gpu_prefill_matmul")
        return (None, "not measured") if g is None else (float(g["value"]), "bench entry")
    if goal_id == "gpu_graph_vs_concat":
        g = _bench_goal(bench, "preallocated_vs_concat")
        return (None, "not measured") if g is None else (float(g["value"]), "eager only")
    return None, "not measured"


def _verdict(entry: Mapping[str, Any]) -> str:
    met = {True: "met", False: "not met", None: "recorded"}.get(entry.get("met"), "?")
    return met if entry.get("at_goal_size", True) else f"{met}, small"


def goal_table(bench: Mapping[str, Any], ids: Sequence[str] = GOAL_IDS) -> list[str]:
    """The lines of a table of ``bench``'s goal entries with these ids, in this order; an id the
    run does not report gets a line that says so. Fits ``TEXT_WIDTH`` columns."""
    lines = [f"{'goal':<28}{'value':>8}{'target':>8}  verdict"]
    for goal_id in ids:
        entry = _bench_goal(bench, goal_id)
        if entry is None:
            lines.append(f"{goal_id:<28}{'-':>8}{'':>8}  not in this run")
            continue
        value, target = entry.get("value"), entry.get("target")
        v = "-" if value is None else f"{float(value):.3f}"
        t = "" if target is None else f"{float(target):g}"
        lines.append(f"{goal_id[:28]:<28}{v:>8}{t:>8}  {_verdict(entry)}")
    return lines


def goal_list(run: Mapping[str, Any], current: Mapping[str, Any] | None = None) -> list[str]:
    """``GPU_GOALS`` as a list of wrapped lines: what each asks, its target, what the recorded run
    gave, and the current code's value when ``current`` (a bench JSON) reports it."""
    out = []
    for goal in GPU_GOALS:
        value, how = value_at_recording(goal.id, run)
        then = "not measured" if value is None else f"{value:.3f} ({how})"
        entry = _bench_goal(current, goal.id)
        if entry is None or entry.get("value") is None:
            now = "not recorded"
        else:
            now = f"{float(entry['value']):.3f}, {_verdict(entry)}"
            target = entry.get("target")
            if target is not None and float(target) != goal.target:
                now += f" against the run's target {float(target):g}"
        text = (
            f"{goal.id}: {goal.what}. Target {goal.target:g}; at {run['commit']}: {then}; "
            f"current code: {now}."
        )
        out += textwrap.wrap(text, TEXT_WIDTH, initial_indent="- ", subsequent_indent="  ")
    return out
