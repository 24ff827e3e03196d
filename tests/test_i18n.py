"""The Chinese edition's catalogs (locales/zh_CN, issue #18): valid, in step with the English
text, free of code outputs, faithful to the markup of each message, and complete.

Completeness is a plain test: an untranslated or fuzzy message fails `make test`. After the
English text changes, `make i18n-update` brings the catalogs in step (tools/i18n.py) and the new
or changed messages must be translated before the change lands.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import PoFileError

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


i18n = _load("kvtutor_tools_i18n", ROOT / "tools" / "i18n.py")
ext = _load("kvtutor_i18n_ext", ROOT / "tools" / "sphinxext" / "kvtutor_i18n.py")
search = _load("kvtutor_search_ext", ROOT / "tools" / "sphinxext" / "kvtutor_search.py")
CATALOGS = i18n.po_files()
INCOMPLETE = i18n.incomplete(CATALOGS)


def _po(tmp_path: Path, page: str, entries: list[tuple[str, str, bool]]) -> Path:
    """A catalog for `page` under tmp_path/zh_CN/LC_MESSAGES with (msgid, msgstr, fuzzy) entries."""
    path = tmp_path / "zh_CN" / "LC_MESSAGES" / f"{page}.po"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ['msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=utf-8\\n"', ""]
    quote = lambda text: json.dumps(text, ensure_ascii=False)  # noqa: E731 (PO strings escape as JSON's)
    for msgid, msgstr, fuzzy in entries:
        lines += ["#, fuzzy"] if fuzzy else []
        lines += [f"msgid {quote(msgid)}", f"msgstr {quote(msgstr)}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# --- the checks themselves --------------------------------------------------------------------


def test_incomplete_names_the_file_and_the_first_messages(tmp_path):
    _po(tmp_path, "book/done", [("One.", "一。", False), ("$T$", "$T$", False)])
    _po(tmp_path, "book/todo", [("One.", "一。", False)] + [(f"Message {i}.", "", False) for i in range(5)])
    _po(tmp_path, "book/fuzzy", [("Old words.", "旧的话。", True)])
    lines = i18n.incomplete(i18n.po_files(tmp_path))
    assert len(lines) == 2, lines
    fuzzy, todo = lines
    assert "book/fuzzy.po" in fuzzy and "0 untranslated, 1 fuzzy of 1" in fuzzy and "'Old words.'" in fuzzy
    assert "book/todo.po" in todo and "5 untranslated, 0 fuzzy of 6" in todo
    assert "'Message 0.'" in todo and "'Message 2.'" in todo and "'Message 3.'" not in todo
    assert i18n.incomplete(i18n.po_files(tmp_path) | {}) == lines
    assert i18n.incomplete({"book/done": tmp_path / "zh_CN/LC_MESSAGES/book/done.po"}) == []


def test_out_of_date_finds_missing_stale_and_orphaned_catalogs(tmp_path):
    pot = tmp_path / "pot"
    for page, ids in {"book/a": ["Kept.", "New."], "book/b": ["B."]}.items():
        path = pot / f"{page}.pot"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f'msgid "{m}"\nmsgstr ""\n\n' for m in ids), encoding="utf-8")
    _po(tmp_path, "book/a", [("Kept.", "留。", False), ("Gone.", "去。", False)])
    _po(tmp_path, "book/c", [("C.", "丙。", False)])
    lines = i18n.out_of_date(i18n.pot_files(pot), i18n.po_files(tmp_path))
    assert len(lines) == 3, lines
    assert any("a.po: 1 message(s) of the English text missing, 1 no longer in it" in line for line in lines)
    assert "no catalog for page book/b" in lines
    assert any("c.po: the page is no longer in the book" in line for line in lines)
    _po(tmp_path, "book/a", [("Kept.", "留。", False), ("New.", "", False)])
    _po(tmp_path, "book/b", [("B.", "", False)])
    (tmp_path / "zh_CN/LC_MESSAGES/book/c.po").unlink()
    assert i18n.out_of_date(i18n.pot_files(pot), i18n.po_files(tmp_path)) == []


def test_a_broken_catalog_is_refused(tmp_path):
    path = _po(tmp_path, "book/x", [("One.", "一。", False)])
    path.write_text(path.read_text(encoding="utf-8") + 'msgid "unterminated\n', encoding="utf-8")
    with pytest.raises(PoFileError):
        i18n.read_catalog(path)


@pytest.mark.parametrize(
    ("msgid", "msgstr", "problem"),
    [
        ("Width {glue:text}`w` and $D$.", "宽度 {glue:text}`w`，$D$。", None),
        ("Width {glue:text}`w`.", "宽度 8。", "{glue:text}`w`"),
        ("See $T = 3$ here.", "见此处。", "$T = 3$"),
        ("Call `f(x)` once.", "调用一次。", "`f(x)`"),
        ("As in {cite:p}`pope2022`.", "如文献所述。", "{cite:p}`pope2022`"),
        ("Next, [Prefill](prefill.ipynb).", "下一章[](prefill.ipynb)。", None),
        ("Next, [Prefill](prefill.ipynb).", "下一章[预填充](decode.ipynb)。", "(prefill.ipynb)"),
        ("The {term}`KV cache`.", "{term}`键/值缓存`。", None),
        ("The {term}`KV cache`.", "键/值缓存。", "{term}"),
        ("See {doc}`prefill`.", "见{doc}`预填充 <prefill>`。", None),
        ("See {doc}`prefill`.", "见{doc}`decode`。", "{doc}`prefill`"),
        ("Also {other-edition}`in Chinese`.", "另有{other-edition}`英文版`。", None),
    ],
)
def test_markup_differences(msgid, msgstr, problem):
    found = i18n.markup_differences(msgid, msgstr)
    if problem is None:
        assert found == []
    else:
        assert found and problem in " ".join(found), found


# --- the extension ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("docname", "language", "uri"),
    [
        ("book/intro", "en", "../zh/book/intro.html"),
        ("book/intro", None, "../zh/book/intro.html"),
        ("book/intro", "zh_CN", "../../book/intro.html"),
        ("book/intro", "zh-CN", "../../book/intro.html"),
        ("index", "en", "zh/index.html"),
        ("a/b/c", "zh_CN", "../../../a/b/c.html"),
    ],
)
def test_counterpart_uri(docname, language, uri):
    assert ext.counterpart_uri(docname, language) == uri


def test_the_two_editions_link_each_other():
    for docname in ["book/intro", "index", "a/b/c"]:
        there = ext.counterpart_uri(docname, "en")
        back = ext.counterpart_uri(docname, "zh_CN")
        # from book/intro.html, "../zh/book/intro.html" is zh/book/intro.html; and back again
        here = Path("/site") / docname
        assert (here.parent / there).resolve() == Path("/site/zh") / f"{docname}.html"
        assert (Path("/site/zh") / docname).parent.joinpath(back).resolve() == Path(f"/site/{docname}.html")


# --- the catalogs in the repository ---------------------------------------------------------------


def test_there_is_a_catalog_for_every_page():
    missing = sorted(set(i18n.toc_pages()) - set(CATALOGS))
    assert not missing, f"pages without a catalog (run `make i18n-update`): {missing}"


@pytest.mark.parametrize("page", sorted(CATALOGS))
def test_catalog_is_valid(page):
    catalog = i18n.read_catalog(CATALOGS[page])
    assert dict(catalog.mime_headers).get("Language") == i18n.LANGUAGE
    assert catalog.charset.lower() == "utf-8"
    assert i18n.messages(catalog), f"{page}: no messages"
    assert not i18n.obsolete({page: CATALOGS[page]})


@pytest.mark.parametrize("page", sorted(CATALOGS))
def test_translations_keep_the_markup(page):
    """A translation keeps every glued number, formula, code span, citation and link target of
    the English (a number typed in by hand would silently go stale)."""
    problems = [
        f"{m.id[:60]!r}: {'; '.join(found)}"
        for m in i18n.messages(i18n.read_catalog(CATALOGS[page]))
        if m.string and (found := i18n.markup_differences(m.id, m.string))
    ]
    assert not problems, "\n".join([f"{i18n.LOCALES.name}/.../{page}.po:", *problems])


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """The English text's messages, extracted now (tools/i18n.py extract, Sphinx's gettext builder)."""
    out = tmp_path_factory.mktemp("gettext") / "gettext"
    cmd = [sys.executable, str(ROOT / "tools" / "i18n.py"), "extract", "--out", str(out), "-q"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = i18n.pot_files(out)
    assert found, f"no .pot files in {out}"
    return found


def test_catalogs_match_the_english_text(templates):
    problems = i18n.out_of_date(templates, CATALOGS)
    assert not problems, "\n".join(["the catalogs are out of date: run `make i18n-update`", *problems])


def test_no_message_comes_from_a_code_cell(templates):
    """Every message of a notebook page is text of its Markdown cells (or, on the root page, a
    caption of _toc.yml): code, outputs and tables that code printed never become messages."""
    squash = lambda text: " ".join(text.split())  # noqa: E731
    toc = squash((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    problems = []
    for page, path in templates.items():
        source = next(ROOT.glob(f"{page}.*"))
        if source.suffix != ".ipynb":
            continue
        cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
        markdown = squash("\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"))
        problems += [
            f"{page}: {m.id[:80]!r}"
            for m in i18n.messages(i18n.read_catalog(path))
            if squash(m.id) not in markdown and squash(m.id) not in toc
        ]
    assert not problems, "\n".join(problems)


def test_every_message_is_translated():
    assert CATALOGS, f"no catalogs in {i18n.LOCALES}"
    heading = "untranslated or fuzzy messages (translate them in the .po files):"
    assert not INCOMPLETE, "\n".join([heading, *INCOMPLETE])


# ---------------------------------------------------------------- the Chinese edition's search


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("预填充", ["预填", "填充"]),
        ("投机解码让小模型起草", ["投机", "机解", "解码", "码让", "让小", "小模", "模型", "型起", "起草"]),
        ("层", ["层"]),
        ("KV缓存（prefix_cache）", ["KV", "缓存", "prefix_cache"]),
        ("ＫＶ 缓存２", ["KV", "缓存", "2"]),  # full-width letters and digits: NFKC
        ("𠀀𠀁", ["𠀀𠀁"]),  # beyond the Basic Multilingual Plane: one pair of two characters
        ("café, 3 个词元。", ["café", "3", "个词", "词元"]),
    ],
)
def test_the_search_cuts_chinese_runs_into_overlapping_pairs(text, terms):
    assert search.split_terms(text) == terms


def test_a_term_is_found_wherever_it_stands():
    """Every pair of a term is among a text's terms wherever the term stands in a run: the
    property jieba's words lacked (it cut 预填充 into 预 and 填充, and 词元 differently by context)."""
    for term in ("预填充", "投机解码", "前缀缓存", "连续批处理", "词元"):
        for text in (term, f"在{term}阶段", f"新{term}。", f"{term}的"):
            assert set(search.split_terms(term)) <= set(search.split_terms(text)), (term, text)


def test_every_query_of_a_page_s_text_is_among_its_index_terms():
    """Whatever run of characters of a page a reader types, one character or many, its terms are
    all indexed for the page."""
    text = "预填充阶段把整个提示词一次算完；每一层的键和值存入缓存。"  # (Latin words are found whole)
    indexed = set(search.index_terms(text))
    for start in range(len(text)):
        for end in range(start + 1, len(text) + 1):
            assert set(search.split_terms(text[start:end])) <= indexed, text[start:end]


def test_the_search_language_indexes_lone_characters_and_keeps_them_unstemmed():
    lang = search.SearchChinese({})
    assert lang.split("连续批处理 caching") == ["连续", "续批", "批处", "处理", "caching", *"连续批处理"]
    assert lang.word_filter("层") and not lang.word_filter("a")
    assert lang.stem("解码") == "解码" and lang.stem("caching") == "cach"
    assert search.is_han("𠀀层") and not search.is_han("KV缓存") and not search.is_han("")


# ---------------------------------------------------------------- printed outputs in Chinese

from kvtutor.book import printed  # noqa: E402

#: Chapters whose printed outputs other work is changing now (issue #44: the calculator): a line
#: of theirs that the tables (kvtutor/book/printed_zh*.py) do not hold stays in English on the
#: Chinese page until its Chinese is added; `python -m kvtutor.book.printed check book/X.ipynb`
#: lists them.
PRINTED_TO_DO = {"kv_memory"}
NOTEBOOKS = sorted(p.stem for p in (ROOT / "book").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", [n for n in NOTEBOOKS if n not in PRINTED_TO_DO])
def test_every_printed_line_has_its_chinese(notebook):
    left = printed.untranslated(ROOT / "book" / f"{notebook}.ipynb")
    assert not left, "\n".join([f"{len(left)} printed lines keep English words:", *left[:20]])


def test_the_to_do_list_is_not_stale():
    done = [n for n in sorted(PRINTED_TO_DO) if not printed.untranslated(ROOT / "book" / f"{n}.ipynb")]
    assert not done, f"every printed line of {done} has its Chinese: take them off PRINTED_TO_DO"
    assert PRINTED_TO_DO <= set(NOTEBOOKS)


def _right_edges(line: str) -> list[int]:
    """The display column after each word of a printed line."""
    return [printed.display_width(line[: m.end()]) for m in re.finditer(r"\S+(?: \S+)*", line)]


def test_a_printed_table_keeps_its_columns():
    english = (
        "     n  cached MFLOP  uncached MFLOP  FLOP ratio\n    16          10.6           168.8        16.0"
    )
    zh, left = printed.chinese_output(english)
    head, row = zh.split("\n")
    assert not left and "缓存 MFLOP" in head and "不缓存 MFLOP" in head and row == english.split("\n")[1]
    assert _right_edges(head) == _right_edges(row)  # each heading ends where its numbers end


def test_labelled_values_stay_in_one_column():
    english = "\n".join(
        ["arrival steps:     [0, 2, 5,", " " * 19 + "37, 41]"]
        + ["new tokens wanted: [11, 33,", " " * 19 + "13, 8]"]
    )
    lines = printed.chinese_output(english)[0].split("\n")
    assert lines[0].startswith("到达的步") and lines[2].startswith("要生成的词元数"), lines
    value_columns = {printed.display_width(line[: re.search(r"[\[\d]", line).start()]) for line in lines}
    assert len(value_columns) == 1, lines


def test_code_errors_and_unknown_words_stay_as_printed():
    for line in (
        "ValueError: ids_T: 1 tokens after 5 cached ones exceed the capacity 5",
        "$ python -m kvtutor bench --size full --out",
        "LlamaConfig(vocab_size=64, d_model=32, n_heads=4,",
        "probe=8 rooflines=74 bandwidth=32",
    ):
        assert printed.chinese_line(line) == (line, [])
    assert printed.chinese_line("zorble frobs: 3") == ("zorble frobs: 3", ["zorble", "frobs"])
    # a line half covered by the tables stays English whole
    assert printed.chinese_line("cached zorbles: 3") == ("cached zorbles: 3", ["zorbles"])
    assert printed.chinese_line("layers[0].w_q     [8, 8]          64") == (
        "layers[0].w_q     [8, 8]          64",
        [],
    )


def test_a_field_of_a_printed_pattern_stays_in_one_column():
    # "median of {n}" must not swallow the rest of a heading line
    out, left = printed.chinese_line("median of 3    long request:  a step with its")
    assert out.startswith("3 轮的") and "长请求" in out and not left


def _column(line: str, text: str) -> int:
    """The display column where ``text`` starts in ``line``."""
    return printed.display_width(line[: line.index(text)])


def test_a_wrapped_value_stays_under_its_lone_label_s_value():
    english = "head 0: q [ 2.151  2.586]\n        k [-0.494 -0.185]\n        v [-0.230 -0.235]"
    lines = printed.chinese_output(english)[0].split("\n")
    assert lines[0].startswith("头 0") and {_column(line, "[") for line in lines} == {_column(lines[0], "[")}
    # a line indented elsewhere is no wrapped value: left as it is
    other = "pass over 5 rows: v = 1.20 decode steps\n                            k  E/(kc+1)"
    assert printed.chinese_output(other)[0].split("\n")[1] == other.split("\n")[1]


def test_a_note_in_the_last_column_and_an_indented_first_column_keep_their_left_edge():
    english = [
        "prefill 'The cat sat' -> 'on'   len(cache) 3, scores [H, T, S] = [2, 3, 3]",
        "decode  'on'          -> 'the'  len(cache) 4, scores [H, T, S] = [2, 1, 4]",
        "decode  'mat'         -> '.'    len(cache) 6, scores [H, T, S] = [2, 1, 6]",
    ]
    lines = printed.chinese_output("\n".join(english))[0].split("\n")
    assert len({_column(line, "len(cache)") for line in lines}) == 1, lines
    assert printed.chinese_line("  cached keys  7", "  cached keys  8")[0].startswith("  缓存")
    # a column over numbers keeps its right edge, as before
    head, row = printed.chinese_output("   keys  plain\n   1024   0.44")[0].split("\n")
    assert printed.display_width(head[: head.index("键") + 1]) == len("   1024"), head


def test_a_column_shares_its_right_edge_only_with_a_number_or_a_column_under_it():
    # "0 bytes" ends where "53,504 bytes" does, by chance: its number stays under the others
    line, below = "float residual        0 bytes", "int8 cache       53,504 bytes (its own nbytes: 53,504)"
    zh = printed.chinese_line(line, below)[0]
    assert zh.startswith("浮点残差") and _column(zh, "0 ") == line.index("0 "), zh


def test_numbers_aligned_on_the_right_after_labels_stay_so():
    for english in (
        "GPU busy per step:                 1.94 ms\n241 launches x 25.0 µs:             6.0 ms",
        "block   1:   0.0% unused\nblock  64:  11.0% unused",
    ):
        lines = printed.chinese_output(english)[0].split("\n")
        assert not any(line in english for line in lines), lines
        ends = {printed.display_width(line[: re.search(r"[\d.]+(?= ?ms|%)", line).end()]) for line in lines}
        assert len(ends) == 1, lines


def test_a_text_the_tables_hold_is_translated_even_where_it_reads_as_a_name():
    line = "matrix-product GFLOPs          86.973       86.973         0.170"
    zh = printed.chinese_line(line, line)[0]
    assert zh.startswith("矩阵乘法 GFLOPs") and zh.endswith(line[-40:]), zh


def test_two_tables_that_give_one_text_two_chineses_are_refused():
    from kvtutor.book import printed_zh

    assert printed_zh._merged({"a": "甲"}, {"a": "甲", "b": "乙"}) == {"a": "甲", "b": "乙"}
    with pytest.raises(ValueError, match="'a'"):
        printed_zh._merged({"a": "甲"}, {"a": "乙"})


def test_printed_html_draws_chinese_two_columns_wide():
    html = printed.printed_html("n <b> 缓存 MFLOP")
    assert html == 'n &lt;b&gt; <span class="kvt-wide" style="width: 4ch">缓存</span> MFLOP'
    assert printed.display_width("缓存 KV") == 7


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_no_printed_line_grows_past_the_text_width(notebook):
    """A Chinese line is never wider than the book's 78 columns unless its English was; an
    aligned group that nobody translated is left as it was."""
    for _, text in printed.printed_texts(ROOT / "book" / f"{notebook}.ipynb"):
        english = text.split("\n")
        limit = max([78, *(len(line) for line in english)])
        chinese = printed.chinese_output(text)[0].split("\n")
        assert max(printed.display_width(line) for line in chinese) <= limit, chinese
        if all(printed.chinese_line(line)[0] == line for line in english):  # nothing to translate
            assert chinese == english
