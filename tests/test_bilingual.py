"""Both editions from one stored output (kvtutor.book.editions, kvtutor.book.labels).

- A figure displays as HTML holding its English PNG and a Chinese PNG drawn from a copy whose
  every word is translated and set in a CJK font, after the CSS that shows one per page.
- Strict mode (``make notebooks``, ``make nbval``) names a string with no translation, and a
  missing font; otherwise the Chinese copy keeps English silently, and nothing reaches stderr
  (without a font, or with a character the font lacks, no matplotlib warning either).
- ``table`` and ``markdown_table`` print the English Markdown nbval compares, and both editions.
- nbval's sanitizers make two renderings of one figure compare equal, and tell tables apart.
- The font draws every character of the label table (no tofu in a Chinese figure).
"""

from __future__ import annotations

import base64
import io
import json
import re
import runpy
import warnings
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from kvtutor.book import editions, labels  # noqa: E402
from kvtutor.book.display import markdown_table, table  # noqa: E402
from kvtutor.plots import diagrams  # noqa: E402
from kvtutor.plots import serving as serving_plots  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
standalone = runpy.run_path(str(ROOT / "tools" / "run_standalone.py"))
HAN = re.compile(r"[\u4e00-\u9fff]")
FONT = editions.cjk_font()
needs_font = pytest.mark.skipif(FONT is None, reason="no CJK font: `make font` installs one")


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(editions.STRICT_ENV, raising=False)
    monkeypatch.delenv(editions.MISSING_ENV, raising=False)
    yield
    plt.close("all")


def throughput_figure(title: str = "What a bigger decode batch costs"):
    """A figure of the package, from small data: a title, axis labels, a legend, fixed ticks."""
    return serving_plots.plot_decode_throughput([1, 2, 4, 8], [100.0, 190.0, 330.0, 420.0], title=title)


def mixed_figure():
    """A hand-made figure with every kind of text: suptitle, categorical ticks, legend title,
    annotation, figure text, colorbar label."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(7, 3))
    ax.bar(["prefill", "decode"], [3.0, 1.0], label="measured")
    ax.legend(title="request")
    ax.annotate("attention", (0, 2), (0.5, 2.5), arrowprops={"arrowstyle": "->"})
    ax.set_ylabel("time per decode step (ms)")
    image = ax2.imshow(np.arange(6.0).reshape(2, 3))
    fig.colorbar(image, ax=ax2, label="probability")
    ax2.set_title("scores $QK^\\top$")
    fig.suptitle("What one more token costs in the cache")
    fig.text(0.01, 0.01, "On your machine")
    return fig


def images(html: str) -> dict[str, tuple[bytes, str]]:
    """{lang: (PNG bytes, alt)} of figure_html's output."""
    found = re.findall(
        r'<div class="kvt-lang-(en|zh)"><img src="data:image/png;base64,([^"]+)" alt="([^"]*)">', html
    )
    return {lang: (base64.b64decode(data), alt) for lang, data, alt in found}


def visible_texts(fig) -> list[str]:
    fig.draw_without_rendering()
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


# ---------------------------------------------------------------- figures


@needs_font
def test_the_formatter_holds_both_images_after_the_edition_css():
    from PIL import Image

    html = editions.figure_html(throughput_figure())
    assert html.startswith(f"<style>{editions.EDITION_CSS}</style>")
    assert html.count("<img ") == 2 and html.count('<div class="kvt-lang-en">') == 1
    found = images(html)
    assert set(found) == {"en", "zh"}
    (en, en_alt), (zh, zh_alt) = found["en"], found["zh"]
    assert en != zh and en.startswith(b"\x89PNG") and zh.startswith(b"\x89PNG")
    for png in (en, zh):
        assert Image.open(io.BytesIO(png)).size[0] > 300
    assert en_alt == "What a bigger decode batch costs" and zh_alt == "更大的解码批要付出什么"
    # the book's stylesheet and the diagrams' outputs hide the same parts
    assert editions.EDITION_CSS == diagrams.EDITION_CSS
    css = " ".join((ROOT / "book" / "_static" / "kvtutor.css").read_text().split())
    assert 'html:not([lang^="zh"]) .kvt-lang-zh, html[lang^="zh"] .kvt-lang-en { display: none; }' in css


@needs_font
@pytest.mark.parametrize("make", [throughput_figure, mixed_figure], ids=["package", "every-kind"])
def test_the_chinese_copy_has_every_text_translated(make):
    fig = make()
    english = visible_texts(fig)
    copy, left = editions.chinese_copy(fig, FONT)
    assert left == []
    chinese = visible_texts(copy)
    assert len(chinese) == len(english)
    for en, zh in zip(english, chinese, strict=True):
        assert zh == labels.translate(en), en
        if labels.needs_translation(en):
            assert HAN.search(zh), (en, zh)
    for text in copy.findobj(Text):
        if HAN.search(text.get_text()):
            assert FONT.name in text.get_fontfamily(), text.get_text()
    assert visible_texts(fig) == english  # the original is untouched
    assert plt.fignum_exists(fig.number) and len(plt.get_fignums()) == 1  # the copy is not pyplot's


@needs_font
def test_tick_labels_from_a_formatter_are_translated():
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [1, 2, 3])
    ax.set_xticks([0, 1, 2], ["prefill", "decode", "2"])
    copy, left = editions.chinese_copy(fig, FONT)
    copy.draw_without_rendering()
    assert left == []
    assert [t.get_text() for t in copy.axes[0].get_xticklabels()] == ["预填充", "解码", "2"]


def test_strict_mode_names_the_untranslated_string(monkeypatch):
    monkeypatch.setenv(editions.STRICT_ENV, "1")
    fig = throughput_figure(title="A title nobody translated")
    if FONT is not None:
        with pytest.raises(editions.EditionError, match="no Chinese for 'A title nobody translated'"):
            editions.figure_html(fig)
    with pytest.raises(editions.EditionError, match="'nobody translated this cell'"):
        table(["model", "KV per token"], [["gpt2", "nobody translated this cell"]])
    with pytest.raises(editions.EditionError, match="labels.py"):
        editions.zh("nor this one")


@needs_font
def test_without_strict_mode_english_stays_and_is_noted_silently(monkeypatch, tmp_path, capfd):
    log = tmp_path / "missing.txt"
    monkeypatch.setenv(editions.MISSING_ENV, str(log))
    html = editions.figure_html(throughput_figure(title="A title nobody translated"))
    assert images(html)["zh"][1] == "A title nobody translated"
    assert [json.loads(line) for line in log.read_text().splitlines()] == ["A title nobody translated"]
    assert capfd.readouterr() == ("", "")


def test_without_a_font_the_chinese_image_is_the_english_one_and_stderr_stays_empty(monkeypatch, capfd):
    fig = throughput_figure()
    monkeypatch.setattr(editions, "cjk_font", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        html = editions.figure_html(fig)
    found = images(html)
    assert found["zh"][0] == found["en"][0]
    assert found["zh"][1] == "更大的解码批要付出什么"  # the alt text does not depend on the font
    assert capfd.readouterr() == ("", "")
    monkeypatch.setenv(editions.STRICT_ENV, "1")
    with pytest.raises(editions.EditionError, match="no CJK font"):
        editions.figure_html(fig)


def test_a_font_file_without_chinese_is_no_cjk_font(monkeypatch, capsys):
    from matplotlib import font_manager

    dejavu = font_manager.findfont("DejaVu Sans")
    monkeypatch.setenv(editions.FONT_ENV, dejavu)
    editions.cjk_font.cache_clear()
    try:
        assert editions.cjk_font() is None
        assert editions.main(["font"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: no CJK font") and editions.FONT_ENV in err
    finally:
        monkeypatch.undo()
        editions.cjk_font.cache_clear()
    assert editions.main(["font"]) == (0 if FONT else 1)


@needs_font
def test_a_character_the_fonts_lack_stays_english_without_a_warning(monkeypatch, capfd):
    # an Egyptian hieroglyph: in neither the CJK font nor matplotlib's DejaVu Sans
    monkeypatch.setitem(labels.ZH, "What a bigger decode batch costs", "更大的解码批 \U00013000")
    fig = throughput_figure()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy, left = editions.chinese_copy(fig, FONT)
        html = editions.figure_html(fig)
    assert left == ["What a bigger decode batch costs"]
    assert copy.axes[0].get_title() == "What a bigger decode batch costs"
    assert "批大小 B" in " ".join(visible_texts(copy))  # the others are translated
    assert capfd.readouterr() == ("", "")
    assert images(html)["en"][0] != images(html)["zh"][0]
    monkeypatch.setenv(editions.STRICT_ENV, "1")
    with pytest.raises(editions.EditionError, match="What a bigger decode batch costs"):
        editions.figure_html(fig)


@needs_font
def test_drawing_every_chinese_figure_warns_nothing():
    for make in (throughput_figure, mixed_figure):
        fig = make()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            png, left, problems = editions._quiet_chinese(fig, FONT)
            copy, _ = editions.chinese_copy(fig, FONT)
            copy.savefig(io.BytesIO(), format="png")  # drawn outside the catch: no warning either
        assert left == [] and problems == [] and png.startswith(b"\x89PNG")


def test_the_formatter_replaces_the_png_one_only_under_the_inline_backend(monkeypatch):
    from IPython.core.formatters import DisplayFormatter
    from matplotlib.figure import Figure

    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    png = shell.display_formatter.formatters["image/png"]
    png.for_type(Figure, lambda fig: b"png")
    assert editions.register_figure_formatter(shell) is False  # Agg, as in these tests
    assert Figure in png.type_printers
    monkeypatch.setattr(matplotlib, "get_backend", lambda **kw: "module://matplotlib_inline.backend_inline")
    assert editions.register_figure_formatter(shell) is True
    assert Figure not in png.type_printers
    data, _ = shell.display_formatter.format(throughput_figure())
    assert set(data) == {"text/plain", "text/html"} and data["text/plain"].startswith("<Figure size")
    assert editions.register_figure_formatter(None) is False  # no IPython shell here


# ---------------------------------------------------------------- tables


def test_table_prints_the_english_markdown_and_both_editions():
    t = table(
        ["", "prefill (T = 3)", "decode (T = 1)"],
        [("input X", "[3, 8]", "[1, 8]"), ("**total bytes**", 8832, 8704)],
    )
    assert t._repr_markdown_() == (
        "|  | prefill (T = 3) | decode (T = 1) |\n| --- | --- | --- |\n"
        "| input X | [3, 8] | [1, 8] |\n| **total bytes** | 8832 | 8704 |"
    )
    assert repr(t) == t.markdown
    html = t._repr_html_()
    assert html.startswith(f"<style>{editions.EDITION_CSS}</style>")
    en, zh = re.fullmatch(
        r'<style>.*?</style><div class="kvt-lang-en">(.*)</div><div class="kvt-lang-zh">(.*)</div>', html
    ).groups()
    assert "<p>input X</p>" in en and "<p><strong>total bytes</strong></p>" in en
    assert "<p>输入 X</p>" in zh and "<p>预填充（T = 3）</p>" in zh and "<strong>字节总计</strong>" in zh
    assert '<table class="table">' in en and zh.count("<tr") == en.count("<tr") == 3


def test_markdown_table_keeps_the_printed_text_and_its_alignment():
    text = (
        "| model | KV per token | 8K tokens |\n|---|---:|---:|\n"
        "| gpt2 | 36.0 KiB | - |\n| gemma-2b | 18.0 KiB | none |"
    )
    t = markdown_table(text)
    assert t.markdown == text and t.header == ("model", "KV per token", "8K tokens")
    assert t.zh_header == ("模型", "每词元 KV", "8K 词元") and t.zh_rows[1] == ("gemma-2b", "18.0 KiB", "无")
    assert '<th class="head text-right"><p>每词元 KV</p></th>' in t.html and "<td><p>gpt2</p></td>" in t.html
    with pytest.raises(ValueError, match="rule line"):
        markdown_table("| a | b |\n| c | d |")
    with pytest.raises(ValueError, match="2 cells"):
        markdown_table("| a | b |\n|---|---|\n| c |")


def test_table_takes_chinese_cells_given_and_checks_their_shape():
    t = table(
        ["model", "note"], [["gpt2", "a <b> & c"]], zh_header=["模型", "备注"], zh_rows=[["gpt2", "甲"]]
    )
    assert "<p>a &lt;b&gt; &amp; c</p>" in t.html and "<p>甲</p>" in t.html
    with pytest.raises(ValueError, match="shape"):
        table(["model", "note"], [["gpt2", "x"]], zh_rows=[["gpt2"]])
    with pytest.raises(ValueError, match="2 cells"):
        table(["model", "note"], [["gpt2"]])


# ---------------------------------------------------------------- what nbval compares


def _notebook(*outputs: dict) -> dict:
    cells = [{"cell_type": "code", "source": "x", "metadata": {}, "outputs": [o]} for o in outputs]
    return {"cells": cells}


def _display(html: str) -> dict:
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/html": html, "text/plain": "<Figure>"},
    }


def test_the_sanitizer_makes_two_renderings_of_a_figure_compare_equal():
    patterns = standalone["sanitizers"]()
    differences = standalone["differences"]
    first = editions.figure_html(throughput_figure())
    other_data = serving_plots.plot_decode_throughput(
        [1, 2, 4, 8], [50.0, 60.0, 70.0, 80.0], title="What a bigger decode batch costs"
    )
    second = editions.figure_html(other_data)
    assert images(first)["en"][0] != images(second)["en"][0]
    assert differences(_notebook(_display(first)), _notebook(_display(second)), patterns) == []
    retitled = editions.figure_html(throughput_figure(title="On your machine"))
    assert differences(_notebook(_display(first)), _notebook(_display(retitled)), patterns)  # the alt text


def test_the_sanitizer_keeps_tables_apart():
    patterns = standalone["sanitizers"]()
    differences = standalone["differences"]

    def shown(t):
        data = {"text/html": t.html, "text/markdown": t.markdown, "text/plain": repr(t)}
        return {"output_type": "execute_result", "metadata": {}, "execution_count": 1, "data": data}

    a = table(["model", "KV per token"], [["gpt2", "36.0 KiB"]])
    b = table(["model", "KV per token"], [["gpt2", "37.0 KiB"]])
    assert differences(_notebook(shown(a)), _notebook(shown(a)), patterns) == []
    assert differences(_notebook(shown(a)), _notebook(shown(b)), patterns)


def test_check_names_the_edition_errors_a_run_stored(tmp_path, capsys):
    error = {
        "output_type": "error",
        "ename": "EditionError",
        "evalue": "Chinese figure 'x': no Chinese for 'y'",
        "traceback": [],
    }
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps(_notebook(_display("<p>ok</p>"), error)))
    assert editions.main(["check", str(path)]) == 1
    assert "code cell 1: EditionError: Chinese figure 'x'" in capsys.readouterr().err
    path.write_text(json.dumps(_notebook(_display("<p>ok</p>"))))
    assert editions.main(["check", str(path)]) == 0


# ---------------------------------------------------------------- the label table


@pytest.mark.parametrize(
    ("text", "needs"),
    [
        ("1,024", False), ("36.0 KiB", False), ("$QK^\\top$", False), ("llama-3.1-8b", False),
        ("GQA 32/8", False), ("W_Q", False), ("`2.13.0+cpu`", False), ("The cat sat", False),
        ("starcoder", False), ("FLOP/byte", False), ("cache.nbytes", False),
        ("prefill", True), ("KV cache", True), ("batch size B", True), ("none", True),
    ],
)  # fmt: skip
def test_what_needs_no_translation(text, needs):
    assert labels.needs_translation(text) is needs
    if not needs:
        assert labels.translate(text) == text


def test_patterns_fill_in_their_fields():
    assert (
        labels.translate("Decode at context 32: step time and tokens/s")
        == "上下文 32 时的解码：步耗时与每秒词元数"
    )
    assert labels.translate("layer 0, head 1") == "第 0 层，头 1"  # the more specific pattern wins
    assert labels.translate("on, head 1") == "on，头 1"
    assert labels.translate("prompt: 10 tokens") == "提示词：10 个词元"  # a field with its own translation
    assert labels.translate("a sentence nobody wrote") is None


MARKUP = re.compile(r"(?<!\\)\$.*?(?<!\\)\$|`[^`]*`|\{\w+\}|\*\*")


def test_every_translation_keeps_its_math_code_and_fields():
    entries = list(labels.ZH.items()) + list(labels.ZH_PATTERNS.items())
    for en, zh in entries:
        assert sorted(MARKUP.findall(en)) == sorted(MARKUP.findall(zh)), en
        assert HAN.search(zh) or not labels.needs_translation(en) or en == zh, en
        assert zh.count("\n") == en.count("\n"), en


@needs_font
def test_the_font_draws_every_character_of_the_label_table():
    """No tofu: the CJK font (or, in plain text, matplotlib's default font beside it) has a glyph
    for every character of every Chinese label."""
    from matplotlib import font_manager

    default = font_manager.findfont("DejaVu Sans")
    for zh in list(labels.ZH.values()) + list(labels.ZH_PATTERNS.values()):
        assert editions._drawable(zh, FONT, default), zh


@needs_font
def test_chinese_glyphs_are_drawn_not_boxes():
    """Each character drawn in the CJK font is its own shape; drawn in a font without it, every
    character is the same missing-glyph box."""
    from matplotlib import font_manager

    def bitmap(char: str, family: str) -> bytes:
        fig = plt.figure(figsize=(0.5, 0.5), dpi=50)
        fig.text(0.1, 0.1, char, fontsize=20, family=family)
        fig.canvas.draw()
        pixels = bytes(np.asarray(fig.canvas.buffer_rgba()))
        plt.close(fig)
        return pixels

    chars = "预填充解码"
    drawn = {bitmap(c, FONT.name) for c in chars}
    assert len(drawn) == len(chars)
    dejavu = font_manager.FontProperties(family="DejaVu Sans").get_name()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing-glyph warnings this check provokes on purpose
        boxes = {bitmap(c, dejavu) for c in chars}
    assert len(boxes) == 1 and not boxes & drawn
