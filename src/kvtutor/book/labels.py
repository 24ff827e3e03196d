"""The Chinese edition's words for what the book's code draws and prints: the titles, axis labels,
legends, annotations and tick labels of its figures, and the cells of its printed tables.

One table for every chapter: ``ZH`` maps an exact English string to its Chinese, and ``ZH_PATTERNS``
the strings that code fills in (f-strings), whose ``{field}`` matches any text and is carried
into the Chinese as it is (or as ``ZH`` translates it). A string with nothing to translate, such
as a number, a unit, a model name, math, or a word of the toy model's vocabulary, is kept as
it is (``needs_translation``). ``translate`` answers None for the rest: ``kvtutor.book.editions``
then fails in strict mode (``make notebooks``, ``make nbval``) and draws the English otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

__all__ = ["ZH", "ZH_PATTERNS", "KEEP", "needs_translation", "translate", "compile_patterns", "fill_pattern"]

#: Words and symbols both editions write the same way: units, acronyms, names of formats.
KEEP = frozenset(
    """
    ms µs us s ns x GiB MiB KiB GB TB GB/s TB/s FLOP FLOPs GFLOP TFLOP TFLOP/s GFLOP/s FLOP/s
    FLOP/byte FLOPs/byte FLOP/B K/V QK Kᵀ log softmax float32 float16 bfloat16 bf16 fp16 fp32 fp8
    int8 int4 GEMM GEMV matmul SDPA LM MLP NumPy PyTorch torch CUDA CPU GPU AMD EPYC NVIDIA H200
    Llama Mistral Mixtral Gemma Qwen DeepSeek GPT GPT-2 StarCoder p50 p90 p99 TTFT TPOT vLLM
    logits kvtutor transformers Python Kᵀ kᵀ
    Intel Intel(R) Xeon Xeon(R) Processor Apple
    """.split()
)

# A model or machine name: letters and digits with dashes or dots ("llama-3.1-8b", "gpt2-xl",
# "qwen2.5-0.5b", "H200"), or a name in capitals ("MHA", "GQA", "KV").
_NAME = re.compile(
    r"(?:[A-Za-z]+[0-9][A-Za-z0-9.]*|[A-Za-z0-9.]+(?:-[A-Za-z0-9.]+)+|[A-Z][A-Z0-9]+s?|[A-Za-z])"
)
# Math ($...$) and code (`...`) are the same in both editions.
_VERBATIM = re.compile(r"(?<!\\)\$.*?(?<!\\)\$|`[^`]*`")
_DOTTED = re.compile(r"[a-z]\w*(?:\.[a-z_]\w*)+")  # torch.cat, cache.nbytes
_WORD = re.compile(r"[A-Za-zµᵀ][A-Za-z0-9µᵀ_./\-]*")


@cache
def _data_words() -> frozenset[str]:
    """Words that are data, never translated: the toy model's vocabulary (tick labels, quoted
    tokens) and the names of the bundled model configurations ("starcoder")."""
    from ..models.hf_config import bundled_models
    from ..models.toy import load_toy_tokenizer

    return frozenset([w.strip("<>") for w in load_toy_tokenizer().vocab] + list(bundled_models()))


def _kept_word(word: str) -> bool:
    """A unit, an acronym, a name, a code identifier (``W_Q``, ``n_kv_heads``) or data."""
    word = word.rstrip(".-/")
    return (
        not word
        or word in KEEP
        or "_" in word
        or bool(_DOTTED.fullmatch(word))
        or word in _data_words()
        or bool(_NAME.fullmatch(word))
    )


def needs_translation(text: str) -> bool:
    """Does ``text`` hold a word a Chinese reader would want in Chinese? Not when it is only
    numbers, punctuation, math (``$...$``), units and acronyms (``KEEP``), model names
    ("llama-3.1-8b"), code (``W_Q``, text in backticks), single letters (the dimension key's T,
    S, B) or the toy model's tokens."""
    plain = _VERBATIM.sub(" ", text)
    return not all(_kept_word(w) for w in _WORD.findall(plain))


#: Exact English -> Chinese. Terms as in the catalogs (locales/zh_CN): 预填充 prefill, 解码 decode,
#: KV 缓存 KV cache, 词元 token, 注意力 attention, 批大小 batch size, 屋顶线 roofline, 成本模型
#: cost model, 步耗时 step time, 上下文 context, 汇聚点 sink, 内存池 pool, 孪生模型 twin.
ZH: dict[str, str] = {
    "figure": "图",
    # ---- the walkthrough: attention, the cache buffer, shapes
    "attention": "注意力",
    "attention output": "注意力输出",
    "score": "分数",
    "scores": "分数",
    "scores $QK^\\top$": "分数 $QK^\\top$",
    "weights $A$ (rows sum to 1)": "权重 $A$（每行和为 1）",
    "causal mask": "因果掩码",
    "causal mask (added)": "因果掩码（加上）",
    "key": "键",
    "query": "查询",
    "key position s": "键位置 s",
    "query position t": "查询位置 t",
    "key position (left of the dashed line: from the cache)": "键位置（虚线左侧：来自缓存）",
    "cache position": "缓存位置",
    "position in the buffer (token written there)": "缓冲区中的位置（写在那里的词元）",
    "embed": "嵌入",
    "LayerNorm": "层归一化",
    "LM head": "语言模型头",
    "result": "结果",
    "weight matrix, read from memory": "权重矩阵，从内存读取",
    "left operand: the new tokens' rows": "左操作数：新词元的行",
    "K/V computed in this pass": "本次计算的 K/V",
    "K/V read from the cache": "从缓存读取的 K/V",
    "one request: x W_Q": "一个请求：x W_Q",
    "one request: q K^T, one head": "一个请求：q K^T，一个头",
    "four requests stacked: X W_Q": "四个请求堆叠：X W_Q",
    "four requests stacked: q_b K_b^T, still one per request": "四个请求堆叠：q_b K_b^T，仍是每个请求一次",
    "dashed: the new query reads\nthat layer's cached K, V\nred edge: k, v appended": (
        "虚线：新查询读取\n该层缓存的 K、V\n红边：追加的 k、v"
    ),
    "KV cache: one token per step": "KV 缓存：每步一个词元",
    "Appending one token's keys to one layer": "向一层追加一个词元的键",
    "tokens in the sequence": "序列中的词元数",
    "tokens generated": "已生成的词元数",
    "token positions": "词元位置",
    "probability": "概率",
    "probability / frequency": "概率 / 频率",
    "first token": "第一个词元",
    "see": "可见",
    "aligned to the last position: right": "对齐到最后一个位置：正确",
    "top-left aligned (is_causal=True): WRONG": "左上角对齐（is_causal=True）：错误",
    "no cache: recompute everything": "无缓存：全部重算",
    # ---- costs and rooflines
    "GFLOP for this token (log scale)": "这个词元的 GFLOP（对数坐标）",
    "GFLOP so far (cumulative) (log scale)": "累计 GFLOP（对数坐标）",
    "GPT-2 small sizes, 16-bit weights and cache": "GPT-2 small 的尺寸，16 位权重与缓存",
    "GPT-2 small sizes, 16-token prompt, greedy generation to 1,024 tokens": (
        "GPT-2 small 的尺寸，16 个词元的提示词，贪心生成到 1,024 个词元"
    ),
    "FLOPs per byte moved": "每搬运一字节的 FLOPs",
    "arithmetic intensity (FLOPs per byte, cost model)": "算术强度（每字节 FLOPs，成本模型）",
    "K/V bytes moved (MiB), cost model": "搬运的 K/V 字节（MiB），成本模型",
    "K, V bytes/s / ceiling": "K、V 字节/秒 / 上限",
    "ceiling (GEMV read)": "上限（GEMV 读取）",
    "roofline": "屋顶线",
    "matrix products": "矩阵乘法",
    "prefill, T tokens (B = 1)": "预填充，T 个词元（B = 1）",
    "prefill (measured)": "预填充（实测）",
    "decode (measured)": "解码（实测）",
    "prefill time (ms)": "预填充时间（ms）",
    "prompt length T": "提示词长度 T",
    "batch size B": "批大小 B",
    "batch size B (query rows stacked in one decode step)": "批大小 B（一个解码步中堆叠的查询行）",
    "query rows that share one read of the weights": "共用一次权重读取的查询行",
    "time per decode step (ms)": "每个解码步的时间（ms）",
    "time proportional to B": "时间与 B 成正比",
    "step time / time at the smallest B": "步耗时 / 最小 B 时的步耗时",
    "step time / step time at B = 1": "步耗时 / B = 1 时的步耗时",
    "1.3 x one row": "一行的 1.3 倍",
    "tokens per second / tokens per second at B = 1": "每秒词元数 / B = 1 时的每秒词元数",
    "ideal: B times the tokens/s of B = 1": "理想：B = 1 时每秒词元数的 B 倍",
    "ideal: B x (tokens/s of one row)": "理想：B ×（一行时的每秒词元数）",
    "measured decode step": "实测的解码步",
    "tokens per second": "每秒词元数",
    "decode tokens per second against batch size: recorded runs": (
        "解码每秒词元数随批大小的变化：已记录的运行"
    ),
    "What a bigger decode batch costs": "更大的解码批要付出什么",
    "tokens/s": "词元/s",
    "tokens/s (one new token)": "词元/s（一个新词元）",
    "tokens already cached S": "已缓存的词元数 S",
    "sequence length n": "序列长度 n",
    "sequence length when the token is produced": "产生该词元时的序列长度",
    "generate time (s), measured": "生成时间（s），实测",
    "with the cache (measured)": "有缓存（实测）",
    "with the cache (roofline)": "有缓存（屋顶线）",
    "with the cache, CUDA graph (measured)": "有缓存，CUDA 图（实测）",
    "recompute, no cache (measured)": "重算，无缓存（实测）",
    "recompute, no cache (roofline)": "重算，无缓存（屋顶线）",
    "Recorded: the small model, float32": "已记录：小模型，float32",
    "On this machine, float32": "本机，float32",
    "On your machine": "你的机器上",
    "1.3B GPT-2 shape": "1.3B 的 GPT-2 形状",
    "1.3B shape": "1.3B 形状",
    "GPT-2 small": "GPT-2 small",
    # ---- preallocated and concatenated caches
    "concat": "拼接",
    "concat: copies the history": "拼接：复制历史",
    "copied by concat": "拼接时复制",
    "torch.cat (copies the history)": "torch.cat（复制历史）",
    "preallocated: new rows only": "预分配：只写新行",
    "preallocated (in place)": "预分配（原地）",
    "write in place (one row)": "原地写入（一行）",
    "written in place": "原地写入",
    "time per append (µs), measured": "每次追加的时间（µs），实测",
    "cache bytes (KiB)": "缓存字节（KiB）",
    "cache.nbytes (KiB)": "cache.nbytes（KiB）",
    "KiB written to the cache so far": "迄今写入缓存的 KiB",
    "cache length (tokens)": "缓存长度（词元）",
    "reserved": "已预留",
    "used (tokens in cache)": "已用（缓存中的词元）",
    "masks": "掩码",
    "cache writes": "缓存写入",
    # ---- flash attention
    "scores, block by block": "分数，逐块",
    "plain: scores, softmax, A V": "普通：分数、softmax、A V",
    "running max m": "累计最大值 m",
    "running sum l": "累计和 l",
    "running sum (dotted: max rose)": "累计和（点线：最大值上升）",
    "l at the final max": "按最终最大值换算的 l",
    "blocks seen": "已处理的块",
    "sum of $e^{s - m}$": "$e^{s - m}$ 之和",
    "split-KV twin": "KV 切分孪生模型",
    # ---- serving: batching, latency, speculative decoding, disaggregation
    "request": "请求",
    "requests per second": "每秒请求数",
    "static": "静态",
    "continuous": "连续",
    "static: last token": "静态：最后一个词元",
    "continuous: last token": "连续：最后一个词元",
    "steps from arrival": "自到达起的步数",
    "TTFT, steps": "TTFT，步数",
    "TPOT, steps per token": "TPOT，每词元步数",
    "throughput, tokens per step": "吞吐量，每步词元数",
    "tokens per step": "每步词元数",
    "step (one token per running request)": "步（每个运行中的请求一个词元）",
    "scheduler step (grey: waiting for a slot, colour: prefilled then decoding)": (
        "调度步（灰色：等待槽位；彩色：预填充后解码）"
    ),
    "time, ms (modelled; bars: prompt steps, ticks: tokens, grey: waiting)": (
        "时间，ms（模型估算；条：提示词步，刻度：词元，灰色：等待）"
    ),
    "time (ms): a tick per token; bar: from arrival to first token": (
        "时间（ms）：每个词元一个刻度；条：从到达到第一个词元"
    ),
    "whole prefill": "整段预填充",
    "chunked": "分块",
    "colocated": "混合部署",
    "disaggregated": "分离部署",
    "longest gap p99": "最长间隔 p99",
    "longest gap p99 (ms)": "最长间隔 p99（ms）",
    "plain decoding": "普通解码",
    "target softmax": "目标模型的 softmax",
    "new tokens per target pass": "目标模型每次前向的新词元数",
    "k, tokens guessed per round": "k，每轮猜测的词元数",
    "speed-up over plain decoding": "相对普通解码的加速比",
    "speedup over plain decoding": "相对普通解码的加速比",
    "layer cut (1 of 2 layers): measured": "截层（2 层取 1 层）：实测",
    "layer cut (1 of 2 layers): theory": "截层（2 层取 1 层）：理论",
    "prompt lookup: measured": "提示词查找：实测",
    "prompt lookup: theory": "提示词查找：理论",
    "position of the predicted token": "被预测词元的位置",
    "toy model, greedy, all corpus prompts": "玩具模型，贪心，语料中的全部提示词",
    "toy model (NumPy), greedy: recorded run": "玩具模型（NumPy），贪心：已记录的运行",
    "measured": "实测",
    # ---- a GPU run
    "share of the step's GPU time": "占该步 GPU 时间的比例",
    "other": "其他",
    "weight products alone": "只做权重乘法",
    "products alone, eager": "只做乘法，eager 模式",
    "products alone, CUDA graph": "只做乘法，CUDA 图",
    "kvtutor generate, eager": "kvtutor generate，eager 模式",
    "transformers eager": "transformers eager 模式",
    "transformers static+compile": "transformers static+compile",
    "ms per token (log scale); label: multiple of the floor": "每词元 ms（对数坐标）；标注：下限的倍数",
    # ---- memory: KV bytes, GQA, windows, int8, RoPE
    "What one more token costs in the cache": "多一个词元在缓存中要付出什么",
    "Measured KV-cache bytes": "实测的 KV 缓存字节数",
    "keys in the cache (and bytes of K and V)": "缓存中的键（以及 K 和 V 的字节数）",
    "context length (tokens per sequence)": "上下文长度（每个序列的词元数）",
    "context length (tokens, one sequence)": "上下文长度（词元，一个序列）",
    "KV cache of one sequence (solid; dotted past the model's context)\nand the weights (dashed)": (
        "一个序列的 KV 缓存（实线；超出模型上下文处为点线）\n以及权重（虚线）"
    ),
    "KV cache of one sequence of 32K tokens (GiB, log scale)": "一个 32K 词元序列的 KV 缓存（GiB，对数坐标）",
    "KV cache per token, all layers (KiB, bf16, log scale)": (
        "每词元的 KV 缓存，所有层（KiB，bf16，对数坐标）"
    ),
    "largest batch": "最大批",
    "Shrinking the cache: fp8 halves it, int8 nearly, a window caps it": (
        "缩小缓存：fp8 减半，int8 接近减半，窗口设上限"
    ),
    "A window caps the cache: full (solid) and windowed (dashed)": (
        "窗口为缓存设上限：完整（实线）与加窗（虚线）"
    ),
    "int8 + scales": "int8 + 缩放因子",
    "full": "完整",
    "bf16, full": "bf16，完整",
    "bf16, windowed": "bf16，加窗",
    "causal (full cache)": "因果（完整缓存）",
    "seen": "可见",
    "seen: sink": "可见：汇聚点",
    "hidden (evicted)": "不可见（已淘汰）",
    "future": "未来",
    "KL(full || windowed), nats": "KL(完整 || 加窗)，nats",
    "key channel": "键通道",
    "max |key|": "max |键|",
    "outlier twin": "离群孪生模型",
    "original": "原始",
    "position interpolation": "位置插值",
    "NTK-aware base": "NTK 感知底数",
    "frequency $\\omega_j$ (radians per position)": "频率 $\\omega_j$（每个位置的弧度）",
    # ---- the paged cache and prefix caching
    "pool": "内存池",
    "pool size (blocks)": "内存池大小（块）",
    "block size (token positions)": "块大小（词元位置数）",
    "unused reserved memory (%)": "未使用的预留内存（%）",
    "prompt tokens from the cache (%)": "来自缓存的提示词词元（%）",
    "no eviction (unlimited pool)": "不淘汰（内存池不限大小）",
    "no hash": "无哈希",
    "prefix caching": "前缀缓存",
    "A and B decoding, blocks taken from the free list": "A 与 B 在解码，块取自空闲链表",
    "A finished: its named blocks stay cached (grey)": "A 已结束：它已命名的块留在缓存中（灰色）",
    "B finds A's two full blocks in the cache (thick: held by two)": (
        "B 在缓存中找到 A 的两个满块（粗框：两者共用）"
    ),
    "B finished; C reuses its blocks": "B 已结束；C 复用它的块",
    "Paging: the only waste is the unfilled end of each last block": (
        "分页：唯一的浪费是每个序列最后一块未填满的尾部"
    ),
    "after one token each: the half-full block was copied for s1 and s2": (
        "各生成一个词元后：半满的块为 s1 和 s2 各复制了一份"
    ),
    "prompt": "提示词",
    # ---- tables printed by code: side_by_side
    "input": "输入",
    "input X": "输入 X",
    "input x": "输入 x",
    "goal": "目标",
    "how Q is computed": "Q 如何计算",
    "how K/V are computed and used": "K/V 如何计算和使用",
    "attention range": "注意力范围",
    "parallelism": "并行性",
    "bottleneck": "瓶颈",
    "bottleneck (FLOPs per byte)": "瓶颈（每字节 FLOPs）",
    "kind of product": "乘法类型",
    "GEMM (matrix x matrix)": "GEMM（矩阵 × 矩阵）",
    "GEMV (vector x matrix)": "GEMV（向量 × 矩阵）",
    "Q Kᵀ (one head)": "Q Kᵀ（一个头）",
    "A V (one head)": "A V（一个头）",
    "needed": "需要",
    "not needed": "不需要",
    "needed: square, lower triangle": "需要：方阵，下三角",
    "not needed: one row, all True": "不需要：只有一行，全为 True",
    "prefill": "预填充",
    "decode": "解码",
    "toy model, float32": "玩具模型，float32",
    "matrix products in the blocks (FLOPs)": "各块中的矩阵乘法（FLOPs）",
    "attention, Q Kᵀ and A V (FLOPs)": "注意力，Q Kᵀ 与 A V（FLOPs）",
    "LM head (FLOPs)": "语言模型头（FLOPs）",
    "**total FLOPs**": "**FLOPs 总计**",
    "weights read (bytes)": "读取的权重（字节）",
    "K/V read from the cache (bytes)": "从缓存读取的 K/V（字节）",
    "K/V written to the cache (bytes)": "写入缓存的 K/V（字节）",
    "**total bytes**": "**字节总计**",
    "**FLOPs per byte**": "**每字节 FLOPs**",
    "decode step with the cache": "使用缓存的解码步",
    "query rows per layer": "每层的查询行",
    "key/value rows computed per layer": "每层计算的键/值行",
    "key/value rows read from the cache per layer": "每层从缓存读取的键/值行",
    "1 token per pass; step n + 1 needs the token of step n": "每次 1 个词元；第 n + 1 步需要第 n 步的词元",
    # ---- the cheat sheet
    "queries q": "查询 q",
    "keys and values k, v": "键和值 k, v",
    "scores q kᵀ": "分数 q kᵀ",
    # ---- kv_memory
    "model": "模型",
    "weights": "权重",
    "KV per token": "每词元 KV",
    "attending layers": "做注意力的层",
    "state per sequence": "每序列的状态",
    "KV per token: bf16": "每词元 KV：bf16",
    "numbers per token and layer": "每词元每层的数值个数",
    "expanded": "展开后",
    "parameters (active)": "参数（激活）",
    "own window": "自带窗口",
    "none": "无",
    # ---- environment
    "What": "项目",
    "Version or value": "版本或取值",
    "Platform": "平台",
    "CPU cores (logical)": "CPU 核心数（逻辑）",
    "PyTorch threads": "PyTorch 线程数",
    "CUDA device": "CUDA 设备",
    "Date of the run": "运行日期",
}

#: English with ``{field}`` placeholders -> Chinese with the same fields, for strings made by code.
ZH_PATTERNS: dict[str, str] = {
    # ---- runs and machines
    "Recorded on {hw} ({n} torch threads), {date}: {model}, {dtype}": (
        "记录于 {hw}（{n} 个 torch 线程），{date}：{model}，{dtype}"
    ),
    "Recorded on {hw} ({n} torch threads), {date}": "记录于 {hw}（{n} 个 torch 线程），{date}",
    "Recorded on {hw}, {date}: {model}, {dtype}": "记录于 {hw}，{date}：{model}，{dtype}",
    "Recorded on an {hw}, {dtype}": "记录于 {hw}，{dtype}",
    "Recorded on {hw}": "记录于 {hw}",
    "On this machine: {cpu} ({n} torch threads), {date}": "本机：{cpu}（{n} 个 torch 线程），{date}",
    "{hw}, recorded {date}": "{hw}，记录于 {date}",
    "recorded {hw}: {model}, {dtype}, context {n}": "已记录的 {hw}：{model}，{dtype}，上下文 {n}",
    "{model}, {dtype}, batch {n}: recorded {hw}, {date}": "{model}，{dtype}，批大小 {n}：记录于 {hw}，{date}",
    "Eager step, capacity {n}: {hw}, {date}": "eager 模式的一步，容量 {n}：{hw}，{date}",
    "Decode at context {n}: step time and tokens/s": "上下文 {n} 时的解码：步耗时与每秒词元数",
    "Decode at context {n}: B rows against one": "上下文 {n} 时的解码：B 行对一行",
    "{dtype}, measured": "{dtype}，实测",
    "{dtype}, roofline": "{dtype}，屋顶线",
    "a memory-bound target ({x} GiB, float32), one CPU thread: recorded": (
        "内存带宽密集型的目标模型（{x} GiB，float32），单个 CPU 线程：已记录"
    ),
    "roofline: {ceilings}": "屋顶线：{ceilings}",
    " ridge {x} FLOP/B": " 脊点 {x} FLOP/B",
    "floor: {x} ms": "下限：{x} ms",
    "two arms fitted (rms error {p}%)": "两段折线拟合（均方根误差 {p}%）",
    "predicted B = {x}": "预测 B = {x}",
    "decode, B sequences at S = {s}": "解码，S = {s} 时的 B 个序列",
    "kvtutor graph, capacity {n}": "kvtutor CUDA 图，容量 {n}",
    "kvtutor graph, {n}-token loop": "kvtutor CUDA 图，{n} 个词元的循环",
    "kvtutor compile, capacity {n}": "kvtutor compile，容量 {n}",
    # ---- the walkthrough
    "prefill (T = {t}): {what}, head {h}": "预填充（T = {t}）：{what}，头 {h}",
    "decode (T = {t}): {what}, head {h}": "解码（T = {t}）：{what}，头 {h}",
    "prefill (T = {t}): {what}": "预填充（T = {t}）：{what}",
    "decode (T = {t}): {what}": "解码（T = {t}）：{what}",
    "prefill (T = {t})": "预填充（T = {t}）",
    "decode (T = {t})": "解码（T = {t}）",
    "prefill, T = S = {n}": "预填充，T = S = {n}",
    "decode, T = 1, S = {n}": "解码，T = 1，S = {n}",
    "prefill -> x{n} '{tok}'": "预填充 -> x{n} '{tok}'",
    "decode '{a}' -> x{n} '{b}'": "解码 '{a}' -> x{n} '{b}'",
    "layer {l}, decode step for '{tok}': one row of scores per head": (
        "第 {l} 层，'{tok}' 的解码步：每个头一行分数"
    ),
    "layer {l} key buffer: '{tok}' written at position {p}": "第 {l} 层的键缓冲区：'{tok}' 写在位置 {p}",
    "layer {l} key buffer after prefill (outlined: written by prefill)": (
        "预填充之后第 {l} 层的键缓冲区（描边：预填充写入）"
    ),
    "layer {l}: its own K cache (the V cache grows the same way)": (
        "第 {l} 层：它自己的 K 缓存（V 缓存以同样方式增长）"
    ),
    "layer {l}\ncache {c}": "第 {l} 层\n缓存 {c}",
    "layer {l}, head {h}": "第 {l} 层，头 {h}",
    "layer {l}": "第 {l} 层",
    "{tok}, head {h}": "{tok}，头 {h}",
    "head {h}": "头 {h}",
    "query at {n}": "位置 {n} 的查询",
    "pos {n}": "位置 {n}",
    "len {n}": "长度 {n}",
    "reserved, not yet written ({n} positions)": "已预留，尚未写入（{n} 个位置）",
    "next token after '{prompt}'": "'{prompt}' 之后的下一个词元",
    "next token: '{tok}'": "下一个词元：'{tok}'",
    'first new token after "{prompt}", temperature {t}': "“{prompt}”之后的第一个新词元，温度 {t}",
    # ---- tables printed by code: side_by_side
    "{shape}: every token": "{shape}：每个词元",
    "{shape}: the new token only": "{shape}：只有新词元",
    "{shape}: all computed, then cached": "{shape}：全部计算，然后缓存",
    "{shape}: {n} from the cache + 1 new": "{shape}：{n} 行来自缓存 + 1 行新算",
    "compute, once T is large ({x} at T = {n})": "计算，T 较大时（T = {n} 时为 {x}）",
    "memory bandwidth ({x})": "内存带宽（{x}）",
    "recompute all {n} tokens": "重算全部 {n} 个词元",
    "the whole prompt, {n} tokens {tokens}": "整个提示词，{n} 个词元 {tokens}",
    "only the newest token, 1 ({tok})": "只有最新的词元，1 个（{tok}）",
    "the first new token ({tok}) and the K/V of all {n} prompt tokens, cached": (
        "第一个新词元（{tok}），以及全部 {n} 个提示词元的 K/V，存入缓存"
    ),
    "the next token ({tok}) from the cached history": "由缓存的历史得出下一个词元（{tok}）",
    "{n} query rows per head: every position": "每个头 {n} 行查询：每个位置一行",
    "{n} query row per head: the new token": "每个头 {n} 行查询：新词元",
    "{n} rows per layer computed, all stored": "每层计算 {n} 行，全部存储",
    "1 row per layer computed and appended; {n} read from the cache": (
        "每层计算并追加 1 行；从缓存读取 {n} 行"
    ),
    "{a} of {b} query-key pairs (causal triangle)": "{b} 个查询-键对中的 {a} 个（因果三角）",
    "{a} of {b} pairs: the new query against every cached key": "{b} 对中的 {a} 对：新查询对每个缓存的键",
    "{n} tokens in one pass, in matrix-matrix products": "{n} 个词元一次算完，用矩阵-矩阵乘法",
    "compute, as T grows: {a} FLOPs over {b} bytes": "计算，随 T 增长：{a} FLOPs 对 {b} 字节",
    "memory bandwidth: {a} FLOPs over {b} bytes": "内存带宽：{a} FLOPs 对 {b} 字节",
    # ---- serving
    "{name}: {n} tokens, {k} cached": "{name}：{n} 个词元，{k} 个已缓存",
    "{name}: {n} tokens": "{name}：{n} 个词元",
    "static batching, {n} slots: {s} steps, {t} tokens per step": (
        "静态批处理，{n} 个槽位：{s} 步，每步 {t} 个词元"
    ),
    "continuous batching, {n} slots: {s} steps, {t} tokens per step": (
        "连续批处理，{n} 个槽位：{s} 步，每步 {t} 个词元"
    ),
    "chunked prefill, at most {n} tokens per step": "分块预填充，每步至多 {n} 个词元",
    "disagg. {split}": "分离部署 {split}",
    "draft samples ({n} samples)": "草稿模型采样（{n} 次）",
    "speculative samples ({n} samples)": "投机采样（{n} 次）",
    "acceptance rate a (k = {k} guesses per round)": "接受率 a（每轮猜 k = {k} 个）",
    # ---- memory
    "{kind}: {q} query heads, {kv} KV heads": "{kind}：{q} 个查询头，{kv} 个 KV 头",
    "{kind}: {q} query heads, 1 KV head": "{kind}：{q} 个查询头，1 个 KV 头",
    "cache: {share} of MHA": "缓存：MHA 的 {share}",
    "{model} weights, {x} GiB": "{model} 的权重，{x} GiB",
    "{model} (weights do not fit)": "{model}（权重放不下）",
    "{model}, window": "{model}，窗口",
    " {x} KiB if heads were cached": " 若缓存各头：{x} KiB",
    " {x}x less": " 降到 1/{x}",
    "Sequences that fit in {n} GiB next to the weights (bf16);\ndotted past the model's context": (
        "{n} GiB 中除权重外能放下的序列数（bf16）；\n超出模型上下文处为点线"
    ),
    "KV-cache bytes of the Llama twin, {a} + {b} tokens": "Llama 孪生模型的 KV 缓存字节数，{a} + {b} 个词元",
    "Layer {l} keys of the {n}-token prompt": "{n} 个词元的提示词在第 {l} 层的键",
    "Llama twin (random weights): KL to the full cache, mean of {n}": (
        "Llama 孪生模型（随机权重）：与完整缓存的 KL 散度，{n} 次平均"
    ),
    " window = {n} ({k} sinks)": " 窗口 = {n}（{k} 个汇聚点）",
    "window W = {w}, {k} sinks": "窗口 W = {w}，{k} 个汇聚点",
    "window W = {w}": "窗口 W = {w}",
    "W = {w}, {k} sinks": "W = {w}，{k} 个汇聚点",
    "W = {w}, 1 sink": "W = {w}，1 个汇聚点",
    "pair {j}": "第 {j} 对",
    "one pair at positions {a} to {b}": "位置 {a} 到 {b} 上的一对",
    "$d_h$ = {d}, base {b}, factor $s$ = {s}": "$d_h$ = {d}，底数 {b}，因子 $s$ = {s}",
    "$d_h$ = {d}, base {b}": "$d_h$ = {d}，底数 {b}",
    "{n}K tokens, all kept": "{n}K 词元，全部保留",
    "{n}K window, {k} sinks": "{n}K 窗口，{k} 个汇聚点",
    "{n}K tokens": "{n}K 词元",
    # ---- the paged cache
    "#{n}\nheld": "#{n}\n占用",
    "#{n}\nfree": "#{n}\n空闲",
    "#{n}\ncached {k}": "#{n}\n缓存 {k}",
    "free list, next out first: {blocks}": "空闲链表（先取出的在前）：{blocks}",
    "after fork: one copy of the prompt, reference count {n} (hatched)": (
        "分叉之后：提示词只有一份，引用计数 {n}（斜线）"
    ),
    "contiguous: {p}% of reserved memory unused, {r} requests running on average, {s} steps": (
        "连续分配：预留内存有 {p}% 未用，平均 {r} 个请求在运行，{s} 步"
    ),
    "paged: {p}% of reserved memory unused, {r} requests running on average, {s} steps": (
        "分页：预留内存有 {p}% 未用，平均 {r} 个请求在运行，{s} 步"
    ),
}


_FIELD = re.compile(r"\{(\w+)\}")


@cache
def compile_patterns(
    table: tuple[tuple[str, str], ...], columns: bool = False
) -> list[tuple[re.Pattern[str], str]]:
    """(English, Chinese) patterns -> (regular expression, Chinese), the most specific (longest
    fixed text) first; a ``{field}`` matches any text (at least one character). With ``columns``
    (printed lines), a field matches no run of two spaces, which separates columns, unless its
    name ends in "_"."""
    out = []
    for en, zh in table:
        parts = _FIELD.split(en)
        narrow = r"(?:(?!  ).)+?"
        regex = "".join(
            re.escape(p) if i % 2 == 0 else f"(?P<{p}>{narrow if columns and not p.endswith('_') else '.+?'})"
            for i, p in enumerate(parts)
        )
        fixed = sum(len(p) for p in parts[::2])
        out.append((fixed, re.compile(regex, re.S), zh))
    out.sort(key=lambda item: -item[0])
    return [(regex, zh) for _, regex, zh in out]


def fill_pattern(zh: str, match: re.Match[str], field: Callable[[str], str]) -> str:
    """A matched pattern's Chinese with each ``{field}`` the matched text, through ``field``."""
    return _FIELD.sub(lambda f: field(match.group(f.group(1))), zh)


def _field(value: str) -> str:
    """A pattern's field in Chinese: its translation where the table has one, else as it is."""
    return ZH.get(value, value)


def translate(text: str) -> str | None:
    """``text`` in Chinese: ``ZH``'s entry, else the first pattern that matches with its fields
    filled in, else ``text`` itself when it needs no translation; None when it has none."""
    if text in ZH:
        return ZH[text]
    for regex, zh in compile_patterns(tuple(ZH_PATTERNS.items())):
        m = regex.fullmatch(text)
        if m:
            return fill_pattern(zh, m, _field)
    if not needs_translation(text):
        return text
    return None
