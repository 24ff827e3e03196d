"""The overview diagrams (kvtutor.plots.diagrams): well-formed SVG, the words of each edition, the
shapes of the configuration they are given, the same text on every run, and arguments checked."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import kvtutor
from kvtutor.plots import diagrams

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
OTHER = kvtutor.GPT2Config(
    vocab_size=50, d_model=12, n_heads=3, n_kv_heads=1, n_layers=5, max_seq_len=40, d_ff=20
)
DRAW = {"loop": diagrams.loop_svg, "block": diagrams.block_svg}
EDITIONS = {"en": diagrams.EN_LABELS, "zh": diagrams.ZH_LABELS}


def texts(svg: str) -> list[str]:
    """The text of every <text> element, sub- and superscripts joined in ("W_Q" reads "WQ")."""
    root = ET.fromstring(svg)
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


def label_lines(table: dict[str, str], **fields: int) -> set[str]:
    """Every line of every label of ``table``, filled in, as ``texts`` reads it."""
    filled = {key: value.format(**fields) for key, value in table.items() if key != "layer"}
    return {re.sub(r"[_^]", "", line) for value in filled.values() for line in value.split("\n")}


def test_the_two_tables_name_the_same_labels_with_the_same_fields():
    assert set(diagrams.ZH_LABELS) == set(diagrams.EN_LABELS)
    for key, english in diagrams.EN_LABELS.items():
        fields = lambda text: sorted(re.findall(r"\{(\w+)\}", text))  # noqa: E731
        assert fields(diagrams.ZH_LABELS[key]) == fields(english), key


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("config", [None, OTHER], ids=["toy", "other"])
def test_each_edition_shows_every_one_of_its_labels(edition, config):
    table = EDITIONS[edition]
    drawn = [diagrams.loop_svg(config, labels=table), diagrams.block_svg(config, labels=table)]
    for svg in drawn:
        root = ET.fromstring(svg)  # well-formed XML
        assert root.tag == f"{SVG}svg"
        assert root.get("viewBox", "").startswith("0 0 800 ") and root.get("width") == "100%"
        assert "max-width: 800px" in root.get("style", "")
    shown = [line for svg in drawn for line in texts(svg)]
    cfg = config or kvtutor.TOY_CONFIG
    wanted = label_lines(table, T=3, T1=4, L=cfg.n_layers, M=cfg.max_seq_len, l=0)
    missing = [line for line in wanted if not any(line in text for text in shown)]  # some precede a shape
    assert not missing, sorted(missing)
    assert table["layer"].format(l=cfg.n_layers - 1) in shown  # the last layer is always drawn


def test_the_chinese_edition_has_no_english_words_of_its_own():
    shown = {line for draw in DRAW.values() for line in texts(draw(labels=diagrams.ZH_LABELS))}
    english = label_lines(diagrams.EN_LABELS, T=3, T1=4, L=2, M=16, l=0) - label_lines(
        diagrams.ZH_LABELS, T=3, T1=4, L=2, M=16, l=0
    )
    assert not english & shown, sorted(english & shown)


@pytest.mark.parametrize("name", DRAW)
def test_the_shapes_are_the_configs(name):
    toy, other = " | ".join(texts(DRAW[name]())), " | ".join(texts(DRAW[name](OTHER)))
    assert toy != other
    if name == "loop":
        for part in [
            "X [3, 8] · W [8, 8]",
            "x [1, 8] · W [8, 8]",
            "[Hkv, S, dh] = [2, S, 4]",
            "M = 16",
            "layer 1",
        ]:
            assert part in toy, part
        for part in ["X [3, 12] · W [12, 12]", "[Hkv, S, dh] = [1, S, 4]", "M = 40", "layer 4", "L = 5"]:
            assert part in other, part
        assert "layer 2" not in other  # five layers: 0, 1, an ellipsis and 4
    else:
        for part in ["[T, 8]", "WQ [8, 8]", "Q [2, T, 4]", "K [2, T, 4]", "K, V [2, S, 4]", "WO [8, 8]"]:
            assert part in toy, part
        assert "WK [12, 4]" in other and "Q [3, T, 4]" in other and "V [1, T, 4]" in other
        assert "K, V [1, S, 4]" in other and "scores [3, T, S]" in other and "WO [12, 12]" in other
        assert "Wfc [12, 20] → GELU → Wproj [20, 12]" in other


def test_the_prompt_length_and_the_steps_change_the_drawing():
    assert "T = 5 tokens" in texts(diagrams.loop_svg(prompt_len=5))
    assert "decode: T = 1, S = 6" in texts(diagrams.block_svg(prompt_len=5))
    prompt = texts(diagrams.loop_svg(prompt="The cat sat"))
    assert "“The cat sat”" in prompt and "x4" in prompt
    cells = lambda svg: svg.count('fill="#f58518" stroke="#999999"')  # noqa: E731 - decode cells
    assert cells(diagrams.loop_svg(decode_steps=5)) - cells(diagrams.loop_svg(decode_steps=2)) == 3 * 2 * 2


@pytest.mark.parametrize("name", DRAW)
def test_the_same_text_every_time_without_ids_or_long_numbers(name):
    svg = DRAW[name](OTHER, labels=diagrams.ZH_LABELS)
    assert svg == DRAW[name](OTHER, labels=diagrams.ZH_LABELS)
    assert " id=" not in svg and "url(#" not in svg
    numbers = re.findall(r'="(-?\d+\.\d+)"', svg) + re.findall(r"(\d+\.\d+)[, ]", svg)
    assert all(len(n.split(".")[1]) == 1 for n in numbers), numbers[:5]


def test_a_diagram_holds_both_editions_and_a_plain_description():
    loop, block = diagrams.loop_diagram(), diagrams.block_diagram()
    for diagram in (loop, block):
        html = diagram._repr_html_()
        assert (
            html.count('<div class="kvt-lang-en"><svg') == 1
            and html.count('<div class="kvt-lang-zh"><svg') == 1
        )
        assert diagram.svg_en in html and diagram.svg_zh in html
        assert repr(diagram) == diagram.text and "0x" not in diagram.text and "\n" not in diagram.text
    assert diagrams.EN_LABELS["prefill"] in loop.svg_en and diagrams.ZH_LABELS["prefill"] in loop.svg_zh
    assert "[2, S, 4]" in loop.text and "2 layers" in loop.text and "X [3, 8]" in loop.text
    assert "Q [2, T, 4]" in block.text and "[8, 32]" in block.text
    assert "[1, S, 4]" in diagrams.block_diagram(OTHER).text


def test_the_books_stylesheet_shows_one_edition_per_page():
    css = (ROOT / "book" / "_static" / "kvtutor.css").read_text(encoding="utf-8")
    squeezed = " ".join(css.split())
    for selector in ['html:not([lang^="zh"]) .kvt-lang-zh', 'html[lang^="zh"] .kvt-lang-en']:
        assert selector in squeezed and selector in diagrams.EDITION_CSS
    assert "display: none" in squeezed


@pytest.mark.parametrize("name", DRAW)
@pytest.mark.parametrize(
    ("labels", "error", "says"),
    [
        ({"nope": "x"}, ValueError, "labels: unknown key"),
        ({"prefill": 3}, TypeError, "labels['prefill']"),
        ({"prefill": "at {Z}"}, ValueError, "labels['prefill']"),
        (["prefill"], TypeError, "labels: expected a mapping"),
        ("Prefill", TypeError, "labels: expected a mapping"),
    ],
)
def test_bad_labels_are_refused_by_name(name, labels, error, says):
    with pytest.raises(error, match=re.escape(says)):
        DRAW[name](labels=labels)


def test_a_partial_table_overrides_only_its_labels():
    shown = texts(diagrams.loop_svg(labels={"prefill": "Pre-fill"}))
    assert "Pre-fill" in shown and "Decode step" in shown and "Prefill" not in shown


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="config"):
        diagrams.loop_svg(object())
    with pytest.raises(ValueError, match="prompt_len"):
        diagrams.block_svg(prompt_len=0)
    with pytest.raises(TypeError, match="decode_steps"):
        diagrams.loop_svg(decode_steps=1.5)
    with pytest.raises(ValueError, match="prompt_len"):
        diagrams.block_svg(prompt_len=16)  # no room left for a decode step
    with pytest.raises(ValueError, match=r"prompt_len \+ decode_steps"):
        diagrams.loop_svg(prompt_len=10, decode_steps=7)


def test_markup_characters_in_labels_stay_well_formed():
    labels = {"prefill": 'a <b> & "c" d_h', "layer_norm": "x^T & y_1"}
    for draw in DRAW.values():
        root = ET.fromstring(draw(labels=labels))  # escaped in text and in the title attribute
        assert "&" in root.get("aria-label", "") and "<" not in root.get("aria-label", "").replace("<b>", "")
    assert 'a <b> & "c" dh' in texts(diagrams.loop_svg(labels=labels))
    assert "xT & y1" in texts(diagrams.block_svg(labels=labels))
