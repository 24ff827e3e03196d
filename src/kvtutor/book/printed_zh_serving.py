"""The Chinese of what the later chapters' code cells print (rooflines, decode on a GPU, paged
caches, serving at scale): phrases in ``PRINTED`` and lines with ``{field}``s in
``PRINTED_LINES``, merged into ``kvtutor.book.printed_zh``'s tables (which say how they are
read). A table's heading written as one run of single spaces (no column breaks for the mechanism
to use) is given whole, spaced so that each heading still ends over its numbers."""

from __future__ import annotations

__all__ = ["PRINTED", "PRINTED_LINES"]

PRINTED: dict[str, str] = {
    # ---- rooflines
    "matrix-product GFLOPs": "矩阵乘法 GFLOPs",
    "last logits": "末行 logits",
    "weights read": "读取的权重",
    "K/V read, MiB": "读取的 K/V，MiB",
    "K/V written, MiB": "写入的 K/V，MiB",
    "rows": "行数",
    "prefill, T = rows": "预填充，T = 行数",
    "decode, B = rows": "解码，B = 行数",
    "dtype": "dtype",
    "read GB/s": "读取 GB/s",
    "ridge": "脊点",
    "of peak": "占峰值",
    "plain read, a sum over 1 GiB": "单纯读取，对 1 GiB 求和",
    "the step's weight products alone": "只做这一步的权重乘法",
    "the decode step": "整个解码步",
    "oneDNN's matmul of one row": "oneDNN 对一行做 matmul",
    "BLAS's GEMV in row blocks, one per core": "BLAS 的 GEMV 按行分块，每核一块",
    "recorded decode sweep": "记录的解码扫描",
    "rms error": "均方根误差",
    "knee B": "拐点 B",
    "never": " 从不",  # as wide as "never": it stays where the numbers of its column end
    "whole step at context S": "上下文为 S 时的整步",
    "from B": "起于 B",
    "recorded CPU": "记录的 CPU",
    "recorded H200": "记录的 H200",
    "sheet": "手册",
    "datasheet": "数据手册",
    "measured ceilings": "实测上限",
    "measured knee": "实测拐点",
    "step B*": "整步 B*",
    # "ridge products" heads two columns: the ridge's FLOP/B and the batch from which the weight
    # products are compute-bound
    "ridge products": "脊点     乘积",
    # ---- decode on a GPU
    "weights read per token": "每词元读取的权重",
    "copy bandwidth": "拷贝带宽",
    "floor": "下限",
    "products": "乘法数",
    "graph ms": "图 ms",
    "of copy": "占拷贝",
    "eager ms graph ms eager/graph GPU µs/product host µs/product": (
        "eager ms    图 ms    eager/图    GPU µs/乘法    主机 µs/乘法"
    ),
    "what it does                             on   calls  GPU µs  name": (
        "做什么                                   位于  调用  GPU µs  名称"
    ),
    "calls": "调用",
    "name": "名称",
    "host": "主机",
    "void": "void",
    "weight product (PyTorch's call)": "权重乘法（PyTorch 的调用）",
    "weight product, plus its bias": "权重乘法，加上偏置",
    "attention (PyTorch's call)": "注意力（PyTorch 的调用）",
    "weight product, on the GPU": "权重乘法，在 GPU 上",
    "attention, handed to cuDNN": "注意力，交给 cuDNN",
    "attention, cuDNN's own": "注意力，cuDNN 自己的",
    "attention, on the GPU": "注意力，在 GPU 上",
    "weight product, split into partial sums": "权重乘法，拆成部分和",
    "LayerNorm (PyTorch's call)": "层归一化（PyTorch 的调用）",
    "LayerNorm, on the GPU": "层归一化，在 GPU 上",
    "mask: a score, or minus infinity": "掩码：分数或负无穷",
    "write the new key or value row": "写入新的键行或值行",
    "write a row, on the GPU": "写入一行，在 GPU 上",
    "mask, on the GPU": "掩码，在 GPU 上",
    "LM head: one row times the vocabulary": "语言模型头：一行乘以整个词表",
    "per step": "每步",
    "per token": "每词元",
    "GPU busy per step": "每步 GPU 忙碌",
    "host time per step": "每步主机时间",
    "profiled": "profiler 下",
    "kvtutor generate": "kvtutor generate",
    "eager": "eager 模式",
    "µs per step": "每步 µs",
    "ms/token products/step": " ms/词元       乘法/步",
    "graph": "CUDA 图",
    "compile": "编译",
    "transformers static cache + compile": "transformers 静态缓存 + 编译",
    "transformers static+compile": "transformers 静态缓存+编译",
    "products alone, graph": "只做乘法，CUDA 图",
    "configuration": "配置",
    "model ms/token": " 模型  ms/词元",
    "tok/s": "词元/s",
    # ---- paged
    "keys and values": "键和值",
    "keys and values identical": "键和值完全相同",
    "block tables:": "块表：",
    "requests  weights GiB  K/V GiB  memory ms  compute ms  tokens/s": (
        "  请求数     权重 GiB  K/V GiB    内存 ms     计算 ms    词元/s"
    ),
    "unused": "未用",
    "running": "运行中",
    "peak": "峰值",
    "preempted": "被抢占",
    "contiguous": "连续",
    "paged": "分页",
    "requests": "请求",
    "memory": "内存",
    "memory budget": "内存预算",
    "compute": "计算",
    "none (partly filled)": "无（未填满）",
    "prefix caching": "前缀缓存",
    "computed before": "在首词元前",
    "first tokens": "计算的位置数",
    "from cache": "来自缓存",
    "evicted": "被驱逐",
    "off": "off",
    # ---- continuous batching
    "modelled, ms most tokens long request  short ones       all requests": (
        "模型估算，ms    最多词元       长请求      短请求           所有请求"
    ),
    # ---- serving at scale
    "one step": "一步",
    "time": "耗时",
    "FLOPs/peak": "FLOPs/峰值",
    "bytes/bw": "字节/带宽",
    "KV read": "KV 读取",
    "bound": "受限于",
    "longest gap of each chat, ms": "每个对话的最长间隔，ms",
    "long prompt TTFT": "长提示词 TTFT",
    "(milliseconds)": "（毫秒）",
    "median, ms": "中位数，ms",
    "prefill alone": "仅预填充",
    "KV transfer": "KV 传输",
    "gap": "间隔",
    "SGLang": "SGLang",
    # the engines' table: each line, as the English wraps it
    "continuous batching": "连续批处理",
    "the V1 scheduler, per iteration; max_num_seqs (--max-num-seqs)": (
        "V1 调度器，每次迭代调度；max_num_seqs (--max-num-seqs)"
    ),
    "caps the batch": "限制批大小",
    "the scheduler; --max-running-requests caps the batch": "调度器；--max-running-requests 限制批大小",
    "paged KV cache (PagedAttention)": "分页 KV 缓存（PagedAttention）",
    "default": "（默认）",
    "by default": "（默认）",
    "a token pool; --page-size, 1 token by default": "词元池；--page-size，默认 1 个词元",
    "chunked prefill": "分块预填充",
    "enable_chunked_prefill (on by default), budget": "enable_chunked_prefill（默认开启），预算",
    "--chunked-prefill-size (-1 turns it off); --enable-mixed-chunk": (
        "--chunked-prefill-size（-1 表示关闭）；--enable-mixed-chunk"
    ),
    "adds decodes": "加入解码",
    "automatic prefix caching; enable_prefix_caching (--enable-": (
        "自动前缀缓存；enable_prefix_caching (--enable-"
    ),
    "prefix-caching), on by default": "prefix-caching)，默认开启",
    "RadixAttention (a radix tree of cached prefixes), on;": "RadixAttention（已缓存前缀的基数树），开启；",
    "speculative decoding": "投机解码",
    "--attention-backend fa3 | flashinfer | triton | ...; --triton-": (
        "--attention-backend fa3 | flashinfer | triton | ...; --triton-"
    ),
    "block masked MHA, XQA in generation": "block masked MHA，生成阶段用 XQA",
    "prefill/decode disaggregation": "预填充与解码分离",
    "disaggregated prefilling: kv_transfer_config (kv_connector": (
        "分离的预填充：kv_transfer_config (kv_connector"
    ),
    "PD disaggregation: --disaggregation-mode prefill | decode,": (
        "PD 分离：--disaggregation-mode prefill | decode，"
    ),
    "quantized KV cache": "量化 KV 缓存",
}

PRINTED_LINES: dict[str, str] = {
    # ---- rooflines
    "recorded {d} run: {cpu} ({n} torch threads), {date}": "{d} 上的记录：{cpu}（{n} 个 torch 线程），{date}",
    "recorded {d} run: {x}": "{d} 上的记录：{x}",
    "vector instructions: {x}": "向量指令：{x}",
    "share of the read rate, the median of {n} rounds": "占读取速率的比例，{n} 轮的中位数",
    "BLAS's GEMV, one {x} matrix": "BLAS 的 GEMV，一个 {x} 矩阵",
    "BLAS's GEMV, {d} weights": "BLAS 的 GEMV，{d} 权重",
    "oneDNN's matmul of one row, {d}": "oneDNN 对一行做 matmul，{d}",
    "one {x} matrix, against a sum in the same run": "一个 {x} 矩阵，对比同一次运行中的求和",
    "ridge {r} FLOP/byte: prefill crosses it at T = {t}": "脊点 {r} FLOP/byte：预填充在 T = {t} 处越过它",
    "decode, S = {s}: at least {a} ms, {b} tokens/s": "解码，S = {s}：至少 {a} ms，{b} 词元/s",
    "prefill, T = {t}: at least {a} ms, {b} tokens/s": "预填充，T = {t}：至少 {a} ms，{b} 词元/s",
    "{n} KV heads: never": "{n} 个 KV 头：从不",
    "{n} KV heads: B = {b}": "{n} 个 KV 头：B = {b}",
    "{d}: intensity at B = {a} {x} FLOP/byte, compute-bound from B = {b}": (
        "{d}：B = {a} 时算术强度 {x} FLOP/byte，从 B = {b} 起是计算密集型"
    ),
    "{g} SXM, datasheet": "{g} SXM，数据手册",
    # ---- decode on a GPU
    "{g}, driver {v}, CUDA {c}": "{g}，驱动 {v}，CUDA {c}",
    "recorded {d}; {t}, batch {b}": "记录于 {d}；{t}，批大小 {b}",
    "{a} ms per token, {b} tokens/s": "每词元 {a} ms，{b} 词元/s",
    "c = {c} µs per product, b = {b} TB/s ({x} of the copy)": (
        "c = 每次乘法 {c} µs，b = {b} TB/s（拷贝的 {x}）"
    ),
    "{m}: the fixed costs are {p} of the chain's time": "{m}：固定开销占整条链时间的 {p}",
    "streaming one {s} matrix at b takes {t} µs": "以 b 流式读取一个 {s} 矩阵需要 {t} µs",
    "kernels the table lists, per step: {n} (at least)": "表中列出的内核，每步：{n}（至少）",
    "{n} launches x {t} µs:": "{n} 次启动 x {t} µs：",
    "transformers generate, eager: {a} ms per token, {x} x the floor,": (
        "transformers generate，eager 模式：每词元 {a} ms，是下限的 {x} 倍，"
    ),
    "{x} of the copy bandwidth": "拷贝带宽的 {x}",
    "kvtutor graph, {n}-token generate loop": "kvtutor CUDA 图，{n} 词元的 generate 循环",
    "kvtutor graph, {n}-token loop": "kvtutor CUDA 图，{n} 词元循环",
    "compiling took {a} s (ours) and {b} s (transformers' first call)": (
        "编译耗时 {a} s（我们的）和 {b} s（transformers 的首次调用）"
    ),
    "buckets: {x}": "键桶：{x}",
    "{n} keys: a step over {m} slots": "{n} 个键：一步覆盖 {m} 个槽位",
    "{n} products, {g} GiB: {t} ms, {x} of the copy bandwidth": "{n} 次乘法，{g} GiB：{t} ms，拷贝带宽的 {x}",
    "about {n} launches per token": "每词元约 {n} 次启动",
    "bucket {b}: {a} of {c} slots read hold no key": "键桶 {b}：读取的 {c} 个槽位中有 {a} 个没有键",
    # ---- paged
    "pool.k_LNHPK {s} | one block: {n} bytes (K and V, all layers)": (
        "pool.k_LNHPK {s} | 一个块：{n} 字节（K 和 V，所有层）"
    ),
    "free list, next out first: {x}": "空闲链表，先分出的在前：{x}",
    "{a}: {n} tokens, block table {x}": "{a}：{n} 个词元，块表 {x}",
    "after {c}: {s}'s block table {t} | next out: {x}": "{c} 之后：{s} 的块表 {t} | 接下来分出：{x}",
    "{a}: {n} tokens in {b} blocks of {p} positions": "{a}：{n} 个词元，占 {b} 个块，每块 {p} 个位置",
    "{n} slots, {m} of them unused": "{n} 个槽位，其中 {m} 个未用",
    "a preallocated cache: {n} slots, {m} of them unused": "预分配的缓存：{n} 个槽位，其中 {m} 个未用",
    "{n} forward passes compared, logits bit-identical: {ok},": (
        "比较了 {n} 次前向计算，logits 逐位相同：{ok}，"
    ),
    "tables: {x}": "块表：{x}",
    "reference counts of blocks {r}: {x}": "块 {r} 的引用计数：{x}",
    "after one token each: {x}": "各加一个词元之后：{x}",
    "continuations equal their contiguous twins: {x}": "续写与各自使用连续缓存的孪生序列相同：{x}",
    "prompt's keys untouched: {ok}": "提示词的键未被改动：{ok}",
    "blocks used {a} of {b}, shared {c}, free {d}": "已用块 {a} / {b}，共享 {c}，空闲 {d}",
    "token positions holding data: {n}": "存有数据的词元位置：{n}",
    "bytes reserved {a}, used {b}, unused {c}": "预留字节 {a}，已用 {b}，未用 {c}",
    "without sharing the three sequences would need {n} blocks": "不共享的话，这三个序列需要 {n} 个块",
    "{n} requests, arrivals over {s} steps": "{n} 个请求，在 {s} 步内到达",
    "prompt length: mean {a}, max {b} | output length: mean {c}, max {d}": (
        "提示词长度：均值 {a}，最大 {b} | 输出长度：均值 {c}，最大 {d}"
    ),
    "final length: mean {a} of max_seq_len {b}": "最终长度：均值 {a}，max_seq_len 为 {b}",
    "{n} readmissions prefilled {m} positions again,": "{n} 次重新接纳又预填充了 {m} 个位置，",
    "{p} of all the positions the run prefilled": "占这次运行预填充的全部位置的 {p}",
    "{m} on the recorded CPU: {t} s, as long as": "在记录的 CPU 上，{m}：{t} s，相当于",
    "{n} decode steps of {r} requests at {p} positions": "{r} 个请求在 {p} 个位置处的 {n} 个解码步",
    "paged: {a} steps + {b}; contiguous: {c} steps": "分页：{a} 步 + {b}；连续：{c} 步",
    "{p_} real caches: {n} requests, {s} steps, reserved/used as counted: {ok}": (
        "{p_} 真实缓存：{n} 个请求，{s} 步，预留/已用与计数一致：{ok}"
    ),
    "block {b_}: {p_} unused": "块 {b_}：{p_} 未用",
    "room for {n} token positions next to the weights": "权重之外还能放 {n} 个词元位置",
    "contiguous, {n} reserved per request: {r} requests": "连续，每个请求预留 {n}：{r} 个请求",
    "paged, {n} tokens held per request on average (+ half a block): {r} requests": (
        "分页，每个请求平均持有 {n} 个词元（+ 半个块）：{r} 个请求"
    ),
    "(reserving {m}'s whole context, {n}, instead: {r} requests)": (
        "（改为预留 {m} 的整个上下文 {n}：{r} 个请求）"
    ),
    "{x} found {a} of its {b} tokens in the cache and prefilled {c}": (
        "{x} 在缓存中找到了它 {b} 个词元中的 {a} 个，预填充了 {c} 个"
    ),
    "block tables: {x}": "块表：{x}",
    "reference counts: {x}": "引用计数：{x}",
    "after {c}: cached, least recently used first: {x}": "{c} 之后：已缓存的块，最久未用的在前：{x}",
    "cached after {c}, least recently used first: {x}": "{c} 之后已缓存的块，最久未用的在前：{x}",
    "{s}'s blocks: {a} | evicted: {b}": "{s} 的块：{a} | 被驱逐：{b}",
    "{x} found {n} tokens in the cache, blocks {b}": "{x} 在缓存中找到 {n} 个词元，块 {b}",
    "{m_} {n} cached | logits, cache within {e}: {a} | same tokens: {b}": (
        "{m_} 已缓存 {n} | logits 和缓存在 {e} 内一致：{a} | 词元相同：{b}"
    ),
    "prompt length: mean {a} ({b} of them shared), output length: mean {c}": (
        "提示词长度：均值 {a}（其中 {b} 共享），输出长度：均值 {c}"
    ),
    "{n} blocks: {p_} from the cache, {e_} evicted, {r_} running": (
        "{n} 块：{p_} 来自缓存，{e_} 被驱逐，{r_} 运行中"
    ),
    "unlimited: {p_} from the cache, {e_} evicted": "无限：{p_} 来自缓存，{e_} 被驱逐",
    "prompt tokens computed: {a} without, {b} with prefix caching": (
        "计算的提示词词元：不用前缀缓存 {a}，用前缀缓存 {b}"
    ),
    "as counted without a model: {ok}": "与不用模型的计数一致：{ok}",
    "the same {n} generated tokens with and without: {ok}": "用与不用时生成的 {n} 个词元相同：{ok}",
    "{n} prompt tokens, {m} of them found in the cache": "{n} 个提示词词元，其中 {m} 个在缓存中找到",
    "cold: {n} tokens computed, {f} MFLOP": "冷启动：计算 {n} 个词元，{f} MFLOP",
    "warm: {n} tokens computed, {f} MFLOP": "热启动：计算 {n} 个词元，{f} MFLOP",
    "time to first token: {a} ms cold, {b} ms with the system prompt cached": (
        "首词元时延：冷启动 {a} ms，系统提示词已缓存时 {b} ms"
    ),
    "the same first tokens: {ok}": "首词元相同：{ok}",
    "{p_} {u_} unused, {r_} running, {s} steps, {n} preempted": (
        "{p_} {u_} 未用，平均 {r_} 个在运行，{s} 步，{n} 次抢占"
    ),
    "with sharing: {a} blocks | without: {b} blocks": "共享：{a} 个块 | 不共享：{b} 个块",
    # ---- serving at scale
    "peak {p} TFLOP/s ({d}, dense), memory {m} TB/s: balance {b} FLOPs per byte": (
        "峰值 {p} TFLOP/s（{d}，稠密），内存 {m} TB/s：脊点为每字节 {b} FLOPs"
    ),
    "weights {w} GiB, of which a decode step reads {r} GiB": "权重 {w} GiB，其中解码步读取 {r} GiB",
    "KV cache {n} KiB per token": "KV 缓存每词元 {n} KiB",
    "prefill, {n} tokens": "预填充，{n} 个词元",
    "decode, {b} x {k} keys": "解码，{b} x {k} 个键",
    "same + {n} prompt tokens": "同上 + {n} 个提示词词元",
    "{n} requests in {t} s ({r} per second)": "{t} s 内 {n} 个请求（每秒 {r} 个）",
    "prompts: {a} to {b} tokens, mean {m}; {p} of them {c} or longer": (
        "提示词：{a} 到 {b} 个词元，均值 {m}；其中 {p} 长度为 {c} 或更长"
    ),
    "new tokens: {a} to {b}, mean {m}": "新词元：{a} 到 {b}，均值 {m}",
    "disagg. {r}": "分离部署 {r}",
    "KV cache sent per request: median {a} GiB, p99 {b} GiB, all {c} GiB": (
        "每个请求发送的 KV 缓存：中位数 {a} GiB，p99 {b} GiB，总计 {c} GiB"
    ),
    "its time on the {bw} link: median {a} ms, p99 {b} ms": "在 {bw} 链路上的耗时：中位数 {a} ms，p99 {b} ms",
    "the prefill GPU is busy {a} of the time, its link {b}": "预填充 GPU 有 {a} 的时间在忙，它的链路 {b}",
    "{m}: colocated wins below about {a} requests/s, chunked above": (
        "{m}：约 {a} 请求/s 以下混合部署胜出，以上分块胜出"
    ),
    "{m}: chunked wins below about {a} requests/s, colocated above": (
        "{m}：约 {a} 请求/s 以下分块胜出，以上混合部署胜出"
    ),
    "{m}: disaggregated wins below about {a} requests/s, chunked above": (
        "{m}：约 {a} 请求/s 以下分离部署胜出，以上分块胜出"
    ),
    "{m}: chunked wins below about {a} requests/s, disaggregated above": (
        "{m}：约 {a} 请求/s 以下分块胜出，以上分离部署胜出"
    ),
    "crossovers of disaggregated with the others (TTFT, TPOT, gap): {a} of {b}": (
        "分离部署与其他方案的交叉点（TTFT、TPOT、间隔）：{a} / {b}"
    ),
    "budget {n_}: TTFT p90 {a_} ms, longest gap p99 {b_} ms": (
        "预算 {n_}：TTFT p90 {a_} ms，最长间隔 p99 {b_} ms"
    ),
    "{bw} GB/s: median TTFT {t_} ms": "{bw} GB/s：TTFT 中位数 {t_} ms",
    "free: median TTFT {t_} ms": "零开销：TTFT 中位数 {t_} ms",
    "The {bw} link was {p} of the median TTFT.": "{bw} 的链路占了 TTFT 中位数的 {p}。",
    # the engines' table (the lines that wrap are the English's)
    "PagedAttention; block_size (--block-size), {n} tokens by": (
        "PagedAttention；block_size (--block-size)，{n} 个词元"
    ),
    "TensorRT-LLM: paged KV cache; KvCacheConfig(tokens_per_block=...), {n} by": (
        "TensorRT-LLM: 分页 KV 缓存；KvCacheConfig(tokens_per_block=...)，{n} 个"
    ),
    "TensorRT-LLM: 'chunked context'; LLM(enable_chunked_prefill=True), budget": (
        "TensorRT-LLM: 'chunked context'；LLM(enable_chunked_prefill=True)，预算"
    ),
    "TensorRT-LLM: 'KV cache reuse'; KvCacheConfig(enable_block_reuse=True), on": (
        "TensorRT-LLM: 'KV cache reuse'；KvCacheConfig(enable_block_reuse=True)，开启"
    ),
    "TensorRT-LLM: TrtllmAttention: FlashAttention in the context phase; multi-": (
        "TensorRT-LLM: TrtllmAttention：上下文阶段用 FlashAttention；multi-"
    ),
    "TensorRT-LLM: disaggregated serving: context and generation servers,": (
        "TensorRT-LLM: 分离式服务：上下文服务器和生成服务器，"
    ),
    "Checked on {d}, in the public sources. vLLM: {x}": "{d} 核对，依据公开源码。vLLM：{x}",
    "({h}), the docs {t} ({v}) and": "({h})，文档 {t} ({v}) 和",
    "{t}. SGLang: {x}": "{t}。SGLang：{x}",
    "({h}). TensorRT-LLM: {x} ({g}), disagg-": "({h})。TensorRT-LLM：{x} ({g})，disagg-",
    "{x}, the KvCacheConfig": "{x}，KvCacheConfig 的",
    "reference ({a}) and the quantization page ({b}).": "参考文档 ({a}) 和量化页面 ({b})。",
}
