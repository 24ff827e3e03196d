"""Timing that can be trusted, and this machine's own ceilings measured in the same run.

On a GPU, CUDA events around each call, after warm-up, with one synchronisation at the end; on a
CPU, ``torch.utils.benchmark.Timer`` with an explicit thread count. Either way the result is a
median with its spread. ``probe_machine`` measures the ceilings that results are divided by: the
read bandwidth of one large matrix-vector product, copy bandwidth, and square-matmul FLOP/s (in
the model's own shapes: ``kvtutor.measure.matmuls``). torch is imported only when a function needs
it.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..environment import env_choice
from ..validate import dtype_info, torch_dtype

__all__ = [
    "Measurement",
    "bench_size",
    "VECTOR_FLAGS",
    "cpu_flags",
    "native_bf16",
    "time_fn",
    "read_probe",
    "time_cpu",
    "time_cuda",
    "hardware_info",
    "load_average",
    "versions",
    "gemv_probe",
    "measure_gemv_bandwidth",
    "measure_copy_bandwidth",
    "matmul_probe",
    "measure_matmul_flops",
    "probe_machine",
    "count_ops",
    "PRODUCT_OPS",
    "PROBE_SIZES",
]

SIZES = ("tiny", "quick", "full")


@dataclass(frozen=True)
class Measurement:
    """Seconds per call: the median over n samples, with the interquartile range and the extremes."""

    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    n: int
    calls_per_sample: int = 1
    times_s: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_times(cls, times_s: Sequence[float], calls_per_sample: int = 1) -> Measurement:
        """Per-call times of each sample -> their median, IQR, min and max."""
        if len(times_s) == 0:
            raise ValueError("times_s: expected at least one time, got none")
        ts = sorted(float(t) for t in times_s)
        if len(ts) >= 2:
            q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
        else:
            q1 = q3 = ts[0]
        return cls(statistics.median(ts), q3 - q1, ts[0], ts[-1], len(ts), calls_per_sample, tuple(ts))

    def as_dict(self) -> dict[str, float]:
        """The statistics as plain numbers (no per-sample times), for JSON."""
        return {
            "median_s": self.median_s,
            "iqr_s": self.iqr_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "n": self.n,
            "calls_per_sample": self.calls_per_sample,
        }


def bench_size(quick: bool | None = None, device: str = "cpu") -> str:
    """How big to make the measurements: ``"tiny"`` (tests), ``"quick"`` (CI) or ``"full"``.

    ``quick=True`` gives "quick"; otherwise the environment variable ``KVTUTOR_BENCH_SIZE`` decides,
    and without it the default is "full" on CUDA and "quick" on a CPU.
    """
    env = env_choice("KVTUTOR_BENCH_SIZE", SIZES)
    if quick:
        return "tiny" if env == "tiny" else "quick"
    if env:
        return env
    return "full" if str(device).startswith("cuda") else "quick"


def _check_device(device: Any) -> str:
    device = str(device)
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"device: expected an available device, got {device!r} but CUDA is not available"
            )
    return device


def time_fn(
    fn: Callable[[], Any],
    device: str = "cpu",
    *,
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 100,
    min_run_time: float = 0.2,
    num_threads: int | None = None,
) -> Measurement:
    """Time ``fn()``: warm-up calls, then samples until both min_repeats and
    min_run_time are reached (``time_cpu``, ``time_cuda``).

    CPU: ``torch.utils.benchmark.Timer`` with ``num_threads`` (default
    ``torch.get_num_threads()``); calls that take under a millisecond are
    grouped so that each sample lasts about one. CUDA: a pair of CUDA events
    around every call and one synchronisation at the end, so the time is the
    device's, launch gaps included.

    The book shows this in "Rooflines: measuring compute-bound and
    memory-bound".
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    device = _check_device(device)
    repeats = _check_repeats(warmup, min_repeats, max_repeats)
    if device.startswith("cuda"):
        return time_cuda(fn, device, *repeats, min_run_time)
    import torch

    threads = torch.get_num_threads() if num_threads is None else num_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        got = f"got {num_threads!r}"
        raise ValueError(f"num_threads: expected an int >= 1, {got}")
    return time_cpu(fn, threads, *repeats, min_run_time)


def _check_repeats(warmup: Any, min_repeats: Any, max_repeats: Any) -> tuple[int, int, int]:
    for name, value, low in (
        ("warmup", warmup, 0),
        ("min_repeats", min_repeats, 1),
        ("max_repeats", max_repeats, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    if max_repeats < min_repeats:
        raise ValueError(f"max_repeats: expected >= min_repeats={min_repeats}, got {max_repeats}")
    return warmup, min_repeats, max_repeats


def time_cpu(
    fn: Callable[[], Any],
    threads: int,
    warmup: int,
    min_repeats: int,
    max_repeats: int,
    min_run_time: float,
) -> Measurement:
    """``time_fn`` on a CPU, unchecked: ``torch.utils.benchmark.Timer`` on
    ``threads`` threads, each sample grouping enough calls to last about a
    millisecond.

    The book shows this in "Rooflines: measuring compute-bound and
    memory-bound".
    """
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    estimate = math.inf
    for _ in range(max(warmup, 1)):
        estimate = min(estimate, timer.timeit(1).median)
    # calls per sample: enough for a sample to last about a millisecond
    if estimate >= 1e-3:
        number = 1
    else:
        number = max(1, min(10_000, int(1e-3 / max(estimate, 1e-7))))
    times: list[float] = []
    spent = 0.0
    while len(times) < min_repeats or (
        spent < min_run_time and len(times) < max_repeats
    ):  # fmt: skip
        per_call = timer.timeit(number).median
        times.append(per_call)
        spent += per_call * number
    return Measurement.from_times(times, number)


def time_cuda(
    fn: Callable[[], Any],
    device: str,
    warmup: int,
    min_repeats: int,
    max_repeats: int,
    min_run_time: float,
) -> Measurement:
    """``time_fn`` on CUDA, unchecked: CUDA events around every call, one synchronisation at the
    end (the queue bounded every 8 calls)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    events, spent, wall0 = [], 0.0, time.perf_counter()
    while len(events) < min_repeats or (spent < min_run_time and len(events) < max_repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
        if len(events) % 8 == 0:  # bound the queue; the events still time the device
            end.synchronize()
        spent = time.perf_counter() - wall0
    torch.cuda.synchronize(device)
    return Measurement.from_times([s.elapsed_time(e) / 1e3 for s, e in events])


# ---------------------------------------------------------------- describing the machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The vector instructions a CPU's kernels dispatch on (Linux's names in /proc/cpuinfo)
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")  # fmt: skip


def cpu_flags() -> list[str]:
    """The CPU's vector instructions among ``VECTOR_FLAGS``, as /proc/cpuinfo lists them; on a
    system without it, [] (torch's ``cpu_capability`` in ``hardware_info`` still says which
    kernels run)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    have = set(line.split(":", 1)[1].split())
                    return [flag for flag in VECTOR_FLAGS if flag in have]
    except OSError:
        pass
    return []


def native_bf16() -> bool:
    """Does this CPU multiply bfloat16 in hardware as torch runs it: AMX tiles (``amx_bf16``) or
    AVX-512 BF16 dot products (``avx512_bf16``) among its flags (``cpu_flags``), torch's kernels at
    the AVX-512 level (``torch.backends.cpu.get_cpu_capability``, which ``ATEN_CPU_CAPABILITY``
    lowers) and oneDNN in this torch? Elsewhere bf16 is emulated: half the bytes, no faster
    (the benchmark's ``bf16`` section then marks it slow)."""
    import torch

    from ..models.torch_weights import onednn_available

    have = {"amx_bf16", "avx512_bf16"} & set(cpu_flags())
    capability = torch.backends.cpu.get_cpu_capability().upper()
    return bool(have) and "AVX512" in capability and onednn_available()


def load_average() -> float | None:
    """The 1-minute load average (other work competing for the CPU), where the OS reports one,
    rounded to 0.01; None elsewhere."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def hardware_info(device: str = "cpu") -> dict[str, Any]:
    """What this machine is: CPU model and vector instructions (and the kernels torch runs on them),
    cores, torch threads, GPU name and memory, OS, date."""
    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": str(device),
        "gpu": None,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average_1m": load_average(),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_bytes"] = int(props.total_memory)
        info["gpu_sm_count"] = int(props.multi_processor_count)
        info["cuda"] = torch.version.cuda
    return info


def versions() -> dict[str, str | None]:
    """Versions of Python and of the packages that matter for the numbers."""
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("kvtutor", "torch", "numpy", "transformers"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def describe(info: dict[str, Any]) -> str:
    """A one-line description of a ``hardware_info`` dict, for captions: 'Intel ... (2 threads), 2025-..'."""
    where = info.get("gpu") or f"{info.get('cpu')} ({info.get('torch_threads')} torch threads)"
    return f"{where}, {str(info.get('date', ''))[:10]}"


# ---------------------------------------------------------------- ceilings


#: Sizes of the probe: GEMV matrix side (fp32 elements; 16384^2 x 4 bytes = 1 GiB), copy buffer
#: bytes, square matmul side, and the time budget of each measurement.
PROBE_SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "tiny": {"gemv_n": 1024, "copy_bytes": 8 << 20, "matmul_n": 256, "min_run_time": 0.02},
        "quick": {"gemv_n": 8192, "copy_bytes": 256 << 20, "matmul_n": 1024, "min_run_time": 0.2},
        "full": {"gemv_n": 16384, "copy_bytes": 1 << 30, "matmul_n": 2048, "min_run_time": 0.5},
    },
    "cuda": {
        "tiny": {"gemv_n": 4096, "copy_bytes": 64 << 20, "matmul_n": 1024, "min_run_time": 0.02},
        "quick": {"gemv_n": 16384, "copy_bytes": 1 << 30, "matmul_n": 4096, "min_run_time": 0.1},
        "full": {"gemv_n": 32768, "copy_bytes": 2 << 30, "matmul_n": 8192, "min_run_time": 0.2},
    },
}


def gemv_probe(n: int, device: str = "cpu", dtype: Any = "float32") -> Callable[..., dict[str, Any]]:
    """Allocate y = A x with A [n, n] once; return ``measure(min_run_time=0.2, num_threads=None)``,
    which times it now and returns what ``measure_gemv_bandwidth`` does. Call it again to measure
    again (between other measurements) without allocating and filling A again."""
    import torch

    device = _check_device(device)
    dt = torch_dtype(dtype)
    a_NN = torch.randn(n, n, device=device, dtype=torch.float32).to(dt)
    x_N = torch.randn(n, device=device, dtype=dt)
    y_N = torch.empty(n, device=device, dtype=dt)
    nbytes = a_NN.numel() * a_NN.element_size()

    def measure(min_run_time: float = 0.2, num_threads: int | None = None) -> dict[str, Any]:
        m = time_fn(
            lambda: torch.mv(a_NN, x_N, out=y_N), device, min_run_time=min_run_time, num_threads=num_threads
        )
        return {"matrix_bytes": nbytes, "shape": [n, n], "dtype": dtype_info(dt).name, "time": m.as_dict(),
                "bytes_per_s": nbytes / m.median_s}  # fmt: skip

    return measure


def read_probe(nbytes: int, device: str = "cpu", dtype: Any = "float32") -> Callable[..., dict[str, Any]]:
    """Allocate ``nbytes`` of ``dtype`` once; return ``measure(min_run_time=0.2, num_threads=None)``,
    which times ``torch.sum`` over them now: the plain read rate, every byte read once and only
    added up (no product, no layout to get wrong), the floor a GEMV's and a decode step's read
    rates are held against."""
    import torch

    device = _check_device(device)
    dt = torch_dtype(dtype)
    n = max(1, int(nbytes) // torch.empty((), dtype=dt).element_size())
    a_N = torch.rand(n, device=device, dtype=torch.float32).to(dt)
    out = torch.empty((), device=device, dtype=dt)
    size = a_N.numel() * a_N.element_size()

    def measure(min_run_time: float = 0.2, num_threads: int | None = None) -> dict[str, Any]:
        m = time_fn(
            lambda: torch.sum(a_N, 0, out=out), device, min_run_time=min_run_time, num_threads=num_threads
        )
        return {
            "bytes": size,
            "dtype": dtype_info(dt).name,
            "time": m.as_dict(),
            "bytes_per_s": size / m.median_s,
        }

    return measure


def measure_gemv_bandwidth(
    n: int,
    device: str = "cpu",
    dtype: Any = "float32",
    min_run_time: float = 0.2,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """Read bandwidth of y = A x with A [n, n]: bytes of A / time, the ceiling of a batch-1 decode step."""
    return gemv_probe(n, device, dtype)(min_run_time, num_threads)


def measure_copy_bandwidth(
    nbytes: int, device: str = "cpu", min_run_time: float = 0.2, num_threads: int | None = None
) -> dict[str, Any]:
    """``dst.copy_(src)`` of nbytes: bandwidth counted as bytes read + bytes written per second."""
    import torch

    device = _check_device(device)
    n = nbytes // 4
    src = torch.ones(n, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    m = time_fn(lambda: dst.copy_(src), device, min_run_time=min_run_time, num_threads=num_threads)
    moved = 2 * n * 4
    return {"buffer_bytes": n * 4, "time": m.as_dict(), "bytes_per_s": moved / m.median_s}


def matmul_probe(
    m: int, k: int, n: int, device: str = "cpu", dtype: Any = "float32", library: str = "blas"
) -> Callable[..., dict[str, Any]]:
    """Allocate [m, k] @ [k, n] and its output once; return ``measure(min_run_time=0.2,
    num_threads=None)``, which times ``torch.matmul`` now and returns what ``measure_matmul_flops``
    does. ``library="onednn"`` (a CPU): oneDNN's matmul of [m, k] by the weight packed once for
    it (``torch_weights.pack``, ``onednn_linear``), as the engine multiplies packed weights."""
    import torch

    from ..models.torch_weights import onednn_linear, pack

    device = _check_device(device)
    dt = torch_dtype(dtype)
    a = torch.randn(m, k, device=device, dtype=torch.float32).to(dt)
    b = torch.randn(k, n, device=device, dtype=torch.float32).to(dt)
    out = torch.empty(m, n, device=device, dtype=dt)
    flops = 2 * m * k * n
    if library == "onednn":
        w_NK = pack(b.mT)
        fn = lambda: onednn_linear(a, w_NK, None)  # noqa: E731
    elif library == "blas":
        fn = lambda: torch.matmul(a, b, out=out)  # noqa: E731
    else:
        raise ValueError(f"library: expected 'blas' or 'onednn', got {library!r}")

    def measure(min_run_time: float = 0.2, num_threads: int | None = None) -> dict[str, Any]:
        meas = time_fn(fn, device, min_run_time=min_run_time, num_threads=num_threads)
        return {"shape": [m, k, n], "dtype": dtype_info(dt).name, "flops": flops, "time": meas.as_dict(),
                "flops_per_s": flops / meas.median_s}  # fmt: skip

    return measure


def measure_matmul_flops(
    m: int,
    k: int,
    n: int,
    device: str = "cpu",
    dtype: Any = "float32",
    min_run_time: float = 0.2,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """FLOP/s of ``torch.matmul`` of [m, k] @ [k, n] (2 m k n FLOPs), written into a preallocated output."""
    return matmul_probe(m, k, n, device, dtype)(min_run_time, num_threads)


def probe_machine(
    device: str = "cpu",
    quick: bool | None = None,
    size: str | None = None,
    dtypes: Sequence[Any] | None = None,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """Measure this machine's ceilings now: GEMV read bandwidth, copy bandwidth, square matmul FLOP/s.

    Returns ``{"hardware", "versions", "size", "gemv", "copy", "matmul"}``; ``matmul`` maps a dtype
    name to its square-matmul result. dtypes default to float32 on a CPU, bfloat16 and float32 on
    CUDA. The GEMV matrix is float32 on a CPU and the first dtype on CUDA.
    """
    device = _check_device(device)
    size = bench_size(quick, device) if size is None else size
    if size not in SIZES:
        raise ValueError(f"size: expected one of {list(SIZES)}, got {size!r}")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if dtypes is None:
        dtypes = ("bfloat16", "float32") if kind == "cuda" else ("float32",)
    s = PROBE_SIZES[kind][size]
    mrt = s["min_run_time"]
    gemv_dtype = dtypes[0] if kind == "cuda" else "float32"
    out: dict[str, Any] = {
        "hardware": hardware_info(device),
        "versions": versions(),
        "size": size,
        "gemv": measure_gemv_bandwidth(s["gemv_n"], device, gemv_dtype, mrt, num_threads),
        "copy": measure_copy_bandwidth(s["copy_bytes"], device, mrt, num_threads),
        "matmul": {},
    }
    n = s["matmul_n"]
    for dt in dtypes:
        out["matmul"][dtype_info(dt).name] = measure_matmul_flops(n, n, n, device, dt, mrt, num_threads)
    return out


#: The operators a matrix product may run as, whichever library a CPU picks for it (BLAS's mat-vec
#: or matmul, oneDNN's on a packed weight): ``count_ops(merge_products=True)`` counts them as one.
PRODUCT_OPS = frozenset({"addmv", "mv", "addmm", "mm", "bmm", "linear", "_linear_pointwise", "mkldnn_linear"})


def count_ops(fn: Callable[[], Any], merge_products: bool = False) -> dict[str, int]:
    """Run ``fn()`` once and count the PyTorch operators it dispatches, views left out.

    On a GPU each such operator is roughly one kernel launch, a fixed few microseconds of CPU time
    however little work the kernel does. Returns ``{operator name: count}``, most frequent first.
    ``merge_products`` counts every matrix product as ``"matrix products"`` (``PRODUCT_OPS``): the
    library a CPU step runs each one through is measured per machine, the count is not.
    """
    if not isinstance(merge_products, bool):
        raise TypeError(f"merge_products: expected a bool, got {type(merge_products).__name__}")
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: dict[str, int] = {}

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                name = func.overloadpacket.__name__
                if merge_products and name in PRODUCT_OPS:
                    name = "matrix products"
                counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with _Counter():
        fn()
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
