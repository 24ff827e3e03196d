"""Smoke tests of kvtutor.plots.figures: each figure builds from real model arrays (Agg backend), has the
expected axes and labels, and bad input raises a ValueError that names the argument."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kvtutor.models.gpt2 import causal_mask, softmax  # noqa: E402
from kvtutor.plots import figures, style  # noqa: E402

TOKENS = ["The", "cat", "sat"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def prefill_trace(toy_model):
    trace: list[dict] = []
    cache = toy_model.new_cache()
    logits_TV = toy_model.prefill([1, 2, 3], cache, trace)
    return trace, logits_TV, cache


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def tick_labels(ax, axis: str = "x") -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def test_plot_matrix_writes_every_value(prefill_trace):
    trace, _, _ = prefill_trace
    q_TK = trace[0]["q_HTK"][0]
    fig = figures.plot_matrix(q_TK, TOKENS, ["a", "b", "c", "d"], title="Q head 0")
    (ax,) = fig.axes
    assert len(ax.texts) == q_TK.size
    assert texts(ax)[0] == f"{float(q_TK[0, 0]):.2f}"
    assert tick_labels(ax, "y") == TOKENS
    assert ax.get_title() == "Q head 0"


def test_plot_attention_prefill_has_scores_mask_and_weights(prefill_trace):
    trace, _, _ = prefill_trace
    scores_TS, a_TS = trace[0]["scores_HTS"][0], trace[0]["a_HTS"][0]
    fig = figures.plot_attention(scores_TS, a_TS, TOKENS, TOKENS, causal_mask(3, 3), title="layer 0")
    assert len(fig.axes) == 3
    scores_ax, mask_ax, weights_ax = fig.axes
    for ax in fig.axes:
        assert tick_labels(ax, "x") == TOKENS
    assert "QK" in scores_ax.get_title()
    # three cells above the diagonal are masked: minus infinity
    assert sum(t == r"$-\infty$" for t in texts(mask_ax)) == 3
    assert texts(weights_ax)[0] == "1.00"
    assert fig.get_suptitle() == "layer 0"
    # drawn no wider than the text column, so the labels are shown at their own size
    assert fig.get_figwidth() <= style.PAGE_WIDTH + 1e-9
    assert min(t.get_fontsize() for ax in fig.axes for t in ax.texts) >= 9


def test_plot_attention_decode_has_two_panels(toy_model):
    cache = toy_model.new_cache()
    toy_model.prefill([1, 2, 3], cache)
    trace: list[dict] = []
    toy_model.decode_step(4, cache, trace)
    scores_HS, a_HS = trace[0]["scores_HTS"][:, 0], trace[0]["a_HTS"][:, 0]
    fig = figures.plot_attention(scores_HS, a_HS, ["head 0", "head 1"], TOKENS + ["on"])
    assert len(fig.axes) == 2
    assert tick_labels(fig.axes[1], "x") == TOKENS + ["on"]
    assert len(fig.axes[1].texts) == a_HS.size


def test_plot_attention_rejects_mismatched_shapes(prefill_trace):
    trace, _, _ = prefill_trace
    scores_TS = trace[0]["scores_HTS"][0]
    with pytest.raises(ValueError, match=r"^a_TS: expected the shape"):
        figures.plot_attention(scores_TS, scores_TS[:2], TOKENS, TOKENS)
    with pytest.raises(ValueError, match=r"^mask_TS: expected the shape"):
        figures.plot_attention(scores_TS, scores_TS, TOKENS, TOKENS, causal_mask(2, 3))
    with pytest.raises(ValueError, match=r"^key_labels: expected 3 labels, got 2"):
        figures.plot_attention(scores_TS, scores_TS, TOKENS, TOKENS[:2])
    with pytest.raises(ValueError, match=r"^scores_TS: expected a 2-D array"):
        figures.plot_attention(scores_TS[0], scores_TS, TOKENS, TOKENS)


def test_plot_token_probs_orders_bars(prefill_trace, toy_model):
    from kvtutor import load_toy_tokenizer

    _, logits_TV, _ = prefill_trace
    probs_V = softmax(logits_TV[-1].astype(np.float64))
    vocab = load_toy_tokenizer().vocab
    for log in (False, True):
        fig = figures.plot_token_probs(probs_V, vocab, top_k=5, log=log)
        (ax,) = fig.axes
        assert len(ax.patches) == 5
        top = max(zip(ax.get_yticks(), tick_labels(ax, "y"), strict=True))
        assert top[1] == "'on'"  # the top bar is the most likely token
        assert ax.get_xscale() == ("log" if log else "linear")
    with pytest.raises(ValueError, match=r"^top_k: expected an int in 1..32"):
        figures.plot_token_probs(probs_V, vocab, top_k=0)
    with pytest.raises(ValueError, match=r"^vocab: expected 32 labels"):
        figures.plot_token_probs(probs_V, vocab[:-1])


def test_plot_cache_buffer_marks_filled_and_new(prefill_trace):
    _, _, cache = prefill_trace
    fig = figures.plot_cache_buffer(cache.k_LHMK[0], len(cache), TOKENS, new=[2])
    assert len(fig.axes) == cache.n_kv_heads
    ax = fig.axes[0]
    labels = tick_labels(ax, "x")
    assert len(labels) == cache.capacity
    assert labels[:3] == ["0\nThe", "1\ncat", "2\nsat"] and labels[3] == "3"
    values = [t for t in texts(ax) if not t.startswith("reserved")]
    assert len(values) == len(cache) * cache.d_head
    assert any(t.startswith("reserved") for t in texts(ax))
    assert len(ax.patches) == 1  # the outline of the new position
    with pytest.raises(ValueError, match=r"^length: expected an int in 0..16"):
        figures.plot_cache_buffer(cache.k_LHMK[0], 17, TOKENS)
    with pytest.raises(ValueError, match=r"^new: expected filled positions"):
        figures.plot_cache_buffer(cache.k_LHMK[0], 3, TOKENS, new=[3])
    with pytest.raises(ValueError, match=r"^buf_HMK: expected a 3-D array"):
        figures.plot_cache_buffer(cache.k_LHMK, 3, TOKENS)


def test_plot_cache_growth_one_panel_per_layer():
    steps = ["prefill", "decode 'on'", "decode 'the'"]
    tokens = TOKENS + ["on", "the"]
    fig = figures.plot_cache_growth([[3, 4, 5], [3, 4, 5]], steps, tokens, capacity=8, n_prompt=3)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert tick_labels(ax, "y") == steps[::-1]
        assert [t for t in texts(ax) if t.startswith("len")] == ["len 3", "len 4", "len 5"]
        # one token label per filled cell: 3 + 4 + 5
        assert sum(t in tokens for t in texts(ax)) == 12
    with pytest.raises(ValueError, match=r"^capacity: expected at least"):
        figures.plot_cache_growth([[3, 4, 5]], steps, tokens, capacity=4, n_prompt=3)
    with pytest.raises(ValueError, match=r"^lengths_LN: expected one row of 3 lengths"):
        figures.plot_cache_growth([[3, 4]], steps, tokens, capacity=8, n_prompt=3)
    with pytest.raises(ValueError, match=r"^tokens: expected a label for each of 5"):
        figures.plot_cache_growth([[3, 4, 5]], steps, TOKENS, capacity=8, n_prompt=3)


def test_plot_matmul_shapes_draws_every_cell_to_scale():
    P = figures.Product
    products = {
        "prefill": [P("X @ W_Q", (3, 8), (8, 8)), P("A V", (3, 3), (3, 4))],
        "decode": [P("x @ W_Q", (1, 8), (8, 8)), P("a V", (1, 4), (4, 4), b_cached_rows=3)],
    }
    fig = figures.plot_matmul_shapes(products, title="shapes")
    assert len(fig.axes) == 4
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["prefill: X @ W_Q", "decode: x @ W_Q", "prefill: A V", "decode: a V"]
    # every cell of A, B and C is a patch, plus one outline per matrix
    decode_proj = fig.axes[1]
    assert len(decode_proj.patches) == 1 * 8 + 8 * 8 + 1 * 8 + 3
    assert "[1, 8]" in texts(decode_proj) and "[8, 8]" in texts(decode_proj)
    # cached rows of V are drawn in the cache colour
    cached = [
        p for p in fig.axes[3].patches if matplotlib.colors.to_hex(p.get_facecolor()) == style.PROMPT_COLOR
    ]
    assert len(cached) == 3 * 4
    # the same cell size everywhere: equal data limits in every panel
    assert len({ax.get_xlim() for ax in fig.axes}) == 1
    # no weight matrix among these: B is green (computed) or blue (cached), and the legend says so
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        "left operand: the new tokens' rows",
        "K/V read from the cache",
        "K/V computed in this pass",
        "result",
    ]
    # a weight matrix is drawn in its own colour, never in the colour of computed K/V
    fig = figures.plot_matmul_shapes({"decode": [P("x @ W_Q", (1, 8), (8, 8), b_is_weight=True)]})
    faces = {matplotlib.colors.to_hex(p.get_facecolor()) for p in fig.axes[0].patches}
    assert style.WEIGHT_COLOR in faces and style.COMPUTED_COLOR not in faces
    assert "weight matrix, read from memory" in [t.get_text() for t in fig.legends[0].get_texts()]
    with pytest.raises(ValueError, match=r"^products: inner dimensions differ"):
        figures.plot_matmul_shapes({"p": [P("bad", (3, 8), (4, 8))]})
    with pytest.raises(ValueError, match=r"^products: expected the same positive number"):
        figures.plot_matmul_shapes({"p": [P("a", (1, 2), (2, 2))], "d": []})
    with pytest.raises(ValueError, match=r"^products: expected at least one phase"):
        figures.plot_matmul_shapes({})


def test_plot_information_flow_has_every_layer_and_token():
    tokens = TOKENS + ["on"]
    fig = figures.plot_information_flow(tokens, n_layers=3, next_token="the")
    (ax,) = fig.axes
    labels = texts(ax)
    for layer in range(3):
        assert f"layer {layer}\ncache {layer}" in labels
    for tok in tokens:
        assert repr(tok) in labels
    assert labels.count("K, V") == 3 * 3  # three cached positions in each of three layers
    assert "next token: 'the'" in labels
    with pytest.raises(ValueError, match=r"^tokens: expected at least 2 tokens"):
        figures.plot_information_flow(["on"], 2, "the")
    with pytest.raises(ValueError, match=r"^n_layers: expected a positive int"):
        figures.plot_information_flow(tokens, 0, "the")


def test_import_kvtutor_does_not_import_matplotlib():
    """Neither the package nor any of its figure or book modules imports matplotlib on import."""
    import subprocess
    import sys

    modules = [
        f"kvtutor.plots.{m}" for m in ("style", "figures", "demos", "perf", "serving", "memory", "gpu")
    ]
    modules += ["kvtutor.book.display", "kvtutor.book.demos", "kvtutor.book.wrong"]
    code = f"import sys, kvtutor, {', '.join(modules)}; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_matplotlib_a_figure_names_the_extra_to_install():
    import subprocess
    import sys

    code = """
import sys
class NoMatplotlib:  # as if matplotlib were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoMatplotlib())
from kvtutor.plots import figures
try:
    figures.plot_matrix([[1.0]])
except ModuleNotFoundError as e:
    print(e.name, "|", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    want = "kvtutor's figures needs matplotlib, which is not installed: pip install 'kvtutor[plots]'"
    assert out.stdout.strip() == f"matplotlib | {want}"


def test_one_palette_for_every_figure_module():
    """The colours live in plots.style: no plotting module defines its own palette."""
    import ast
    from pathlib import Path

    import kvtutor.plots

    for path in Path(kvtutor.plots.__file__).parent.glob("*.py"):
        if path.name == "style.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                assert not any(n.lstrip("_").endswith(("COLOR", "COLORS")) for n in names), (path.name, names)
