"""kvtutor.measure.gpu_report: the profiler-table parser on the recorded H200 table and on a fresh CPU
profile, the categories and their shares, the fixed-cost fit, the anchors against the stored
ratios, the goal table and list (with and without a run of the current code); and the figures of
kvtutor.plots.gpu."""

from __future__ import annotations

import copy

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from kvtutor.measure import gpu_report as g  # noqa: E402
from kvtutor.measure import recorded  # noqa: E402
from kvtutor.plots import gpu as gpu_plots  # noqa: E402
from kvtutor.text import TEXT_WIDTH  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def run():
    return recorded.h200_run()


@pytest.fixture(scope="module")
def table(run):
    return g.parse_kernel_table(run["kernels"])


@pytest.mark.parametrize(
    ("text", "us"),
    [("3.288ms", 3288.0), ("762.524us", 762.524), ("1.5s", 1.5e6), ("250ns", 0.25), ("0.000us", 0.0)],
)
def test_parse_time_us(text, us):
    assert g.parse_time_us(text) == pytest.approx(us)


@pytest.mark.parametrize("text", ["", "3.2", "ms", "3.2 hours", "1.0e3us"])
def test_parse_time_us_rejects(text):
    with pytest.raises(ValueError, match="text"):
        g.parse_time_us(text)


def test_recorded_table_rows_and_totals(table):
    assert len(table.rows) == 18
    addmm = table.row("aten::addmm")
    assert (addmm.calls, addmm.self_cpu_us, addmm.self_device_us) == (480, 17435.0, 4818.0)
    assert table.row("aten::_scaled_dot_product_cudnn_attention").self_cpu_us == pytest.approx(762.524)
    assert table.self_cpu_total_us == 94356.0 and table.self_device_total_us == 9723.0
    # names with spaces stay whole
    assert any(r.name.startswith("void at::native::(anonymous namespace)::") for r in table.rows)
    with pytest.raises(KeyError):
        table.row("aten::nothing")


def test_kernels_are_the_rows_without_host_time(table):
    kernels = table.kernels
    assert len(kernels) == 7
    assert all(r.cpu_total_us == 0 and not r.launches_work for r in kernels)
    assert table.kernel_launches() == 240 + 120 + 120 + 120 + 245 + 240 + 120
    launching = {r.name for r in table.rows if r.launches_work}
    assert launching == {
        "aten::addmm",
        "aten::mm",
        "aten::_cudnn_attention_forward",
        "aten::native_layer_norm",
        "aten::where",
        "aten::index_copy_",
    }


def test_device_time_by_category(table):
    by_cat = table.device_time_by_category()
    assert tuple(by_cat) == g.CATEGORIES
    assert sum(by_cat.values()) == pytest.approx(table.self_device_total_us)
    assert by_cat["matrix products"] == pytest.approx(4818.0 + 341.467)
    assert by_cat["attention"] == pytest.approx(1740.0)
    assert by_cat["LayerNorm"] == pytest.approx(1176.0)
    assert by_cat["masks"] == pytest.approx(379.225)
    assert by_cat["cache writes"] == pytest.approx(610.901)
    assert 0.45 < by_cat["matrix products"] / table.self_device_total_us < 0.6  # "about half"


def test_device_time_beyond_total_is_rejected(table):
    bad = g.KernelTable(table.rows, table.self_cpu_total_us, 1000.0)
    with pytest.raises(ValueError, match="exceeds the total"):
        bad.device_time_by_category()


@pytest.mark.parametrize(
    ("name", "cat"),
    [
        ("aten::addmm", "matrix products"),
        ("aten::mm", "matrix products"),
        ("aten::addmv", "matrix products"),
        ("aten::linear", "matrix products"),
        ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_bias_TNT", "matrix products"),
        ("ampere_bf16_s16816gemm_bf16_128x64", "matrix products"),
        ("aten::_cudnn_attention_forward", "attention"),
        ("aten::_scaled_dot_product_flash_attention", "attention"),
        ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_...", "attention"),
        ("aten::native_layer_norm", "LayerNorm"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kerne...", "LayerNorm"),
        ("aten::where", "masks"),
        ("aten::masked_fill_", "masks"),
        ("aten::index_copy_", "cache writes"),
        ("aten::gelu", "other"),
        ("aten::add_", "other"),
        ("aten::mmx", "other"),
    ],
)
def test_category(name, cat):
    assert g.category(name) == cat


def test_parses_a_fresh_cpu_profile():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    a, b = torch.ones(64, 64), torch.ones(64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch.addmv(b, a, b)
            torch.layer_norm(a, (64,))
    text = prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)
    parsed = g.parse_kernel_table(text)
    assert parsed.row("aten::addmv").calls == 3
    assert parsed.row("aten::layer_norm").calls == 3
    assert parsed.self_cpu_total_us > 0 and parsed.self_device_total_us == 0.0
    assert parsed.kernels == () and parsed.kernel_launches() == 0
    assert sum(parsed.device_time_by_category().values()) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no table here\n",
        "----  ----\nName  Self CPU\n----  ----\nx  1us\n----  ----\nSelf CPU time total: 1us\n",
    ],
)
def test_parse_rejects_what_is_not_a_table(text):
    with pytest.raises(ValueError, match="text"):
        g.parse_kernel_table(text)


def test_parse_needs_the_total_line(run):
    text = run["kernels"].split("Self CPU time total")[0]
    with pytest.raises(ValueError, match="Self CPU time total"):
        g.parse_kernel_table(text)
    with pytest.raises(ValueError, match="text"):
        g.parse_kernel_table(None)  # type: ignore[arg-type]


def test_fixed_cost_fit_recovers_exact_points():
    c, bw = 3e-6, 4e12
    pts = [(n, nbytes, n * c + nbytes / bw) for n, nbytes in ((97, 2.6e9), (129, 13.3e9), (10, 1e8))]
    got_c, got_bw = g.fixed_cost_fit(pts)
    assert got_c == pytest.approx(c, rel=1e-6) and got_bw == pytest.approx(bw, rel=1e-6)


@pytest.mark.parametrize(
    "pts",
    [[(1, 1e6, 1e-3)], [(1, 1e6, 1e-3), (2, 2e6, 2e-3)], [(1, 2, 3, 4), (5, 6, 7, 8)]],
)
def test_fixed_cost_fit_rejects(pts):
    with pytest.raises(ValueError, match="points"):
        g.fixed_cost_fit(pts)


def test_anchors_match_the_stored_ratios(run):
    a = run["anchors"]
    rows = g.anchors(a)
    assert [r.s_per_token for r in rows] == sorted(r.s_per_token for r in rows)
    by = {(r.model, r.label): r for r in rows}
    chain = by[("1.3B", "products alone, CUDA graph")]
    assert chain.fraction_of_copy == pytest.approx(a["gemv_chain_1.3b"]["graph_mbu_vs_copy"])
    assert by[("6.7B", "products alone, CUDA graph")].fraction_of_copy == pytest.approx(
        a["gemv_chain_6.7b"]["graph_mbu_vs_copy"]
    )
    for label, section in (
        ("kvtutor graph, capacity 32", "ours_graph_cap32"),
        ("kvtutor graph, capacity 4096", "ours_graph_cap4096"),
        ("kvtutor compile, capacity 32", "ours_compile_mode"),
        ("transformers eager", "hf_eager_generate"),
        ("transformers static+compile", "hf_static_compiled_generate"),
    ):
        assert by[("1.3B", label)].fraction_of_copy == pytest.approx(a[section]["mbu_vs_copy"])
    assert by[("1.3B", "transformers eager")].tok_per_s == pytest.approx(a["hf_eager_generate"]["tok_per_s"])
    assert {r.model for r in g.anchors(a, model="1.3B")} == {"1.3B"}
    assert len(g.anchors(a, model="6.7B")) == 1


def test_anchors_leave_out_skipped_sections(run):
    a = copy.deepcopy(run["anchors"])
    a["ours_compile_mode"] = "skipped: too little time for inductor"
    a["hf_eager_generate"] = {"error": "RuntimeError()"}
    labels = {r.label for r in g.anchors(a)}
    assert "kvtutor compile, capacity 32" not in labels and "transformers eager" not in labels
    assert "kvtutor graph, capacity 32" in labels


def test_recording(run):
    readme = recorded.run_path(f"{run['folder']}/README.md").read_text(encoding="utf-8")
    rec = g.recording(run, readme)
    assert rec == {
        "gpu": "NVIDIA H200",
        "driver": "580.159.04",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "commit": "6d8bdd6",
        "date": "2026-11-30",
    }
    assert g.recording(run)["driver"] == "?"


def test_values_at_recording_are_the_issues_now_column(run):
    def value(goal_id):
        return g.value_at_recording(goal_id, run)[0]

    assert value("gpu_decode_vs_products") == pytest.approx(0.48, abs=0.005)
    assert value("gpu_decode_bandwidth_7b") is None
    assert value("gpu_generate_vs_hf_static") == pytest.approx(1.6, abs=0.01)
    assert value("gpu_prefill_matmul") == pytest.approx(0.660, abs=0.001)
    assert value("gpu_graph_vs_concat") == pytest.approx(0.82, abs=0.005)
    assert value("no_such_goal") is None


def test_goal_table_does_not_assume_ids(run):
    lines = g.goal_table(run["bench"])
    assert len(lines) == 1 + len(g.GOAL_IDS)
    assert all(len(line) <= TEXT_WIDTH for line in lines)
    assert sum("not in this run" in line for line in lines) == len(g.GOAL_IDS) - 1
    (prefill,) = [line for line in lines if line.startswith("gpu_prefill_matmul")]
    assert "0.660" in prefill and prefill.endswith("met")
    assert len(g.goal_table({"goals": []}, ())) == 1
    assert "not in this run" in g.goal_table({}, ["x"])[1]


def test_goal_table_of_a_complete_run():
    goals = [
        {"id": i, "value": 1.0 + k, "target": 0.5, "met": True, "at_goal_size": k != 1}
        for k, i in enumerate(g.GOAL_IDS)
    ]
    goals[2] = {**goals[2], "value": None, "target": None, "met": None}
    lines = g.goal_table({"goals": goals})
    assert lines[1].split() == ["gpu_decode_vs_products", "1.000", "0.5", "met"]
    assert lines[2].endswith("met, small")
    assert lines[3].split() == ["gpu_generate_vs_hf_static", "-", "recorded"]
    assert not any("not in this run" in line for line in lines)


def test_goal_list(run):
    lines = g.goal_list(run)
    assert all(len(line) <= TEXT_WIDTH for line in lines)
    text = " ".join(line.strip() for line in lines)
    assert sum(line.startswith("- ") for line in lines) == len(g.GPU_GOALS)
    assert text.count("current code: not recorded") == len(g.GPU_GOALS)
    assert "at 6d8bdd6: 0.477" in text and "at 6d8bdd6: not measured" in text
    current = {"goals": [{"id": "gpu_prefill_matmul", "value": 0.8, "target": 0.75, "met": True}]}
    text = " ".join(line.strip() for line in g.goal_list(run, current))
    assert "current code: 0.800, met." in text
    current["goals"][0]["target"] = 0.6  # a run that still used another target says so
    text = " ".join(line.strip() for line in g.goal_list(run, current))
    assert "current code: 0.800, met against the run's target 0.6." in text
    assert text.count("current code: not recorded") == len(g.GPU_GOALS) - 1


def test_plot_device_time(table):
    by_cat = table.device_time_by_category()
    fig = gpu_plots.plot_device_time(by_cat, title="t")
    (ax,) = fig.axes
    assert len(ax.patches) == len(g.CATEGORIES)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(g.CATEGORIES)
    assert ax.get_title() == "t"
    with pytest.raises(ValueError, match="by_category"):
        gpu_plots.plot_device_time({})


def test_plot_step_times(run):
    rows = g.anchors(run["anchors"], model="1.3B")
    fig = gpu_plots.plot_step_times(rows)
    (ax,) = fig.axes
    assert len(ax.patches) == len(rows)
    labels = [t.get_text() for t in ax.texts]
    assert labels[0] == "1.6x"  # products alone: 1 / 0.615
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["weight products alone", "kvtutor", "transformers", "floor: 0.62 ms"]
    with pytest.raises(ValueError, match="one model"):
        gpu_plots.plot_step_times(g.anchors(run["anchors"]))
    with pytest.raises(ValueError, match="configs"):
        gpu_plots.plot_step_times([])


def test_every_row_of_the_recorded_table_has_plain_words(table):
    words = {r.name: g.plain_words(r) for r in table.rows}
    assert not any(w.split(",")[0] in g.CATEGORIES[-1:] for w in words.values()), words
    assert words["aten::addmm"].startswith("weight product")
    assert words["aten::index_copy_"] == "write the new key or value row"
    kernels = [words[r.name] for r in table.kernels]
    assert all(w.endswith("on the GPU") or "partial sums" in w for w in kernels), kernels
    assert g.plain_words(g.ProfileRow("aten::gelu", 1, 1.0, 1.0)) == "other, PyTorch operator"
    with pytest.raises(TypeError, match="row"):
        g.plain_words("aten::addmm")


def test_anchors_take_one_copy_bandwidth_for_every_fraction(run):
    a = run["anchors"]
    own = {(r.model, r.label): r.fraction_of_copy for r in g.anchors(a)}
    twice = a["copy_bw"]["bytes_rw_per_s"] * 2
    half = {(r.model, r.label): r.fraction_of_copy for r in g.anchors(a, copy_bw=twice)}
    assert half.keys() == own.keys() and all(half[k] == pytest.approx(own[k] / 2) for k in own)
    for bad in (0, -1.0, "4e12", True):
        with pytest.raises(ValueError, match="copy_bw"):
            g.anchors(a, copy_bw=bad)
