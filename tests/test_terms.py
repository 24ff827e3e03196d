"""The Chinese edition's words (issue #27): one term per idea, Chinese text on every {term} role,
reductions written as reductions, cross-references named by their target's title, and catalog
headers without placeholders.

Every check reads the catalogs in locales/zh_CN (tools/i18n.py) and is a function of the catalogs it
is given, so that each test below also feeds it a bad catalog in tmp_path and shows that it bites.
What the checks read is the *prose* of a translation: code spans, math, glued values, references
and link targets are the English text's own (tests/test_i18n.py checks that they are kept), a word
in Chinese quotation marks is a mention ("the documents write “LayerNorm”"), and a Latin word in
full-width parentheses is a gloss (前馈网络（FFN）), so neither is a use.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import i18n  # noqa: E402

CATALOGS = i18n.po_files()
BOOK = ROOT / "book"


@dataclass(frozen=True)
class Term:
    """One idea: the English term, the one Chinese rendering the edition uses, and the renderings
    it must not use (regular expressions; a Latin variant matches as a whole word, any case)."""

    english: str
    chinese: str
    variants: tuple[str, ...]


TERMS = (
    Term("KV cache", "KV 缓存", ("键/值缓存", "键值缓存", "KV cache")),
    Term("KV heads", "KV 头", ("键值头", "键/值头", "KV heads?")),
    Term("roofline", "屋顶线", ("roofline", "屋顶模型")),
    Term("ridge point", "脊点", ("平衡点", "ridge point")),
    Term("cost model", "成本模型", ("代价模型", "cost model")),
    Term("batch size", "批大小", ("批量", "批次", "批尺寸", "batch size")),
    Term("LayerNorm", "层归一化", ("LayerNorm", "层标准化", "层规范化")),
    Term("CUDA graph", "CUDA 图", ("CUDA graphs?",)),
    Term("LM head", "语言模型头", ("LM head",)),
    Term("FFN", "前馈网络", ("FFN",)),
    Term("forward pass", "前向计算", ("前向传播", "前向传递")),
    Term("eager (PyTorch)", "eager 模式", ("即时执行",)),
    Term("key buckets", "键桶", ("键分桶", "key buckets?")),
    Term("launch-bound", "启动受限", ("受启动限制", "launch-bound")),
    Term("block table", "块表", ("区块表", "页表", "block tables?")),
    Term("preemption", "抢占", ("抢先", "预占", r"preempt\w*")),
    Term("token", "词元", ("令牌", "tokens?")),
    Term("Point N (the questions page)", "第 N 点", (r"要点 ?\d", r"Point \d")),
    Term("Solution (of an exercise)", "答案", ("解答",)),
)

# A reduction by a factor: "降到 1/X" or "减少 X%", never "小 X 倍" (which reads as X hundred
# percent smaller): a word of reduction, then a number, a glued value (X) or "how many", then 倍.
_NUMBER = r"(?:[\d.,]+|X|几|许多|多少|数|若干)"
REDUCTION = re.compile(
    rf"(?:节省|省下?|减少|减小|缩小|缩短|降低|少|小|短|低)了?\s*{_NUMBER}(?:\s*(?:到|至|-|~)\s*{_NUMBER})?\s*倍"
    r"|倍(?:更)?(?:少|小|短|低)"
)

CJK = re.compile(r"[\u4e00-\u9fff]")
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
TERM_ROLE = re.compile(r"\{term\}`([^`]*)`")
PAGE_LINK = re.compile(r"\[([^\]]*)\]\(([\w./-]+?)(\.ipynb|\.md)\)")


def term_parts(content: str) -> tuple[str, str]:
    """The text a {term} role shows and the glossary entry it names: `text <target>` or `target`."""
    match = re.fullmatch(r"(.*?)\s*<([^<>]+)>", content.strip(), re.S)
    return (match.group(1), match.group(2)) if match else (content, content)


def prose(msgstr: str) -> str:
    """What a reader of the translation reads as its own words: a {term} role by the text it
    shows, glued values as X, and without code, math, other roles, link targets, quoted mentions
    (“...”) and Latin glosses in full-width parentheses."""
    text = TERM_ROLE.sub(lambda m: term_parts(m.group(1))[0], msgstr)
    text = re.sub(r"\{glue(?::\w+)?\}`[^`]*`", "X", text)
    text = ROLE.sub(" ", text)
    text = re.sub(r"``.+?``|`[^`]+`", " ", text)
    text = re.sub(r"\$[^$]+\$", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"“[^”]*”", " ", text)
    return re.sub(r"（[ -~]*）", " ", text)


def translations(catalogs: dict[str, Path]):
    """(page, msgid, msgstr) of every translated message whose translation is not the English
    itself (a name, a number, a glossary's English headword)."""
    for page, path in catalogs.items():
        for message in i18n.messages(i18n.read_catalog(path)):
            if message.string and message.string != message.id:
                yield page, message.id, message.string


def _where(page: str, msgid: str) -> str:
    return f"{page}: {msgid[:60]!r}"


def _variant_pattern(variant: str) -> re.Pattern:
    if re.match(r"[A-Za-z]", variant):
        return re.compile(rf"(?<![A-Za-z_]){variant}(?![A-Za-z_])", re.I)
    return re.compile(variant)


def term_problems(catalogs: dict[str, Path], terms: tuple[Term, ...] = TERMS) -> list[str]:
    """One line per drifted rendering: page, msgid start, the variant and the term to use."""
    patterns = [(term, _variant_pattern(v)) for term in terms for v in term.variants]
    problems = []
    for page, msgid, msgstr in translations(catalogs):
        text = prose(msgstr)
        for term, pattern in patterns:
            for found in pattern.findall(text):
                problems.append(f"{_where(page, msgid)}: {found!r} for {term.english}, use {term.chinese}")
    return problems


def reduction_problems(catalogs: dict[str, Path]) -> list[str]:
    """One line per reduction written as "N 倍"."""
    return [
        f"{_where(page, msgid)}: {found.group(0)!r}, write 降到 1/X or 减少 X%"
        for page, msgid, msgstr in translations(catalogs)
        for found in REDUCTION.finditer(prose(msgstr))
    ]


def english_title(page: str) -> str:
    """The first heading of a page of the book ("book/gqa"), as the English source writes it."""
    notebook, markdown = ROOT / f"{page}.ipynb", ROOT / f"{page}.md"
    if notebook.exists():
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = markdown.read_text(encoding="utf-8")
    return re.search(r"^# (.+?)\s*$", text, re.M).group(1)


def chinese_titles(catalogs: dict[str, Path]) -> dict[str, str]:
    """Each page's title as its catalog translates it, by page ("book/gqa")."""
    titles = {}
    for page, path in catalogs.items():
        message = i18n.read_catalog(path).get(english_title(page))
        if message is not None and message.string:
            titles[page] = message.string
    return titles


def link_problems(catalogs: dict[str, Path], titles: dict[str, str]) -> list[str]:
    """One line per link to a page whose text is neither empty, `[](page.ipynb)`, nor the page's
    Chinese title. (A link to a section, `page.md#anchor`, may name the section.)"""
    problems = []
    for page, msgid, msgstr in translations(catalogs):
        folder = page.rsplit("/", 1)[0]
        for text, target, suffix in PAGE_LINK.findall(msgstr):
            name = f"{folder}/{target}"
            if text and text != titles.get(name):
                problems.append(
                    f"{_where(page, msgid)}: [{text}]({target}{suffix}) but the page is titled "
                    f"{titles.get(name)!r}: write []({target}{suffix})"
                )
    return problems


def glossary_entries(path: Path = BOOK / "glossary.md") -> list[tuple[str, ...]]:
    """The headwords of every entry of the glossary: the lines of a {glossary} block that are not
    indented, one entry per run of them (English first, then the Chinese)."""
    entries = []
    for block in re.findall(r"```\{glossary\}\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        heads: list[str] = []
        for line in block.split("\n"):
            if line.strip() and not line.startswith((" ", "\t")):
                heads.append(line.strip())
            elif heads:
                entries.append(tuple(heads))
                heads = []
        if heads:
            entries.append(tuple(heads))
    return entries


def term_role_problems(catalogs: dict[str, Path], entries: list[tuple[str, ...]]) -> list[str]:
    """One line per {term} role of a translation that names no glossary entry, or that shows a
    Latin text on a Chinese page where the entry has a Chinese headword: a bare {term}`prefill`
    renders the English word; {term}`预填充 <prefill>` shows Chinese and links the entry."""
    by_headword = {head.lower(): heads for heads in entries for head in heads}
    problems = []
    for page, msgid, msgstr in translations(catalogs):
        for content in TERM_ROLE.findall(msgstr):
            text, target = term_parts(content)
            heads = by_headword.get(target.strip().lower())
            if heads is None:
                problems.append(f"{_where(page, msgid)}: {{term}}`{content}` names no glossary entry")
            elif not CJK.search(text) and any(CJK.search(h) for h in heads):
                chinese = next(h for h in heads if CJK.search(h))
                problems.append(
                    f"{_where(page, msgid)}: {{term}}`{content}` shows English on a Chinese page: "
                    f"write {{term}}`{chinese} <{heads[0]}>`"
                )
    return problems


def header_problems(catalogs: dict[str, Path]) -> list[str]:
    """One line per catalog whose header is not the book's (i18n.catalog_header): placeholders
    left by Sphinx or sphinx-intl, a fuzzy header, another project, version or translator."""
    problems = []
    for page, path in catalogs.items():
        text = path.read_text(encoding="utf-8")
        head = text[: text.find("\n\n") + 2]
        left = [p for p in i18n.PLACEHOLDERS if p in head]
        if left:
            problems.append(f"{page}: the header still says {', '.join(map(repr, left))}")
        fields = dict(re.findall(r'^"([\w-]+): ?(.*?)\s*\\n"$', head, re.M))
        if head != i18n.catalog_header(page, fields):
            problems.append(f"{page}: the header is not the book's (tools/i18n.py catalog_header)")
    return problems


# The catalogs of the book


def test_one_rendering_per_term():
    problems = term_problems(CATALOGS)
    assert not problems, "\n".join(["drifted terms (tests/test_terms.py TERMS):", *problems])


def test_term_roles_show_chinese_and_name_an_entry():
    problems = term_role_problems(CATALOGS, glossary_entries())
    assert not problems, "\n".join(problems)


def test_reductions_are_not_written_as_multiples():
    problems = reduction_problems(CATALOGS)
    assert not problems, "\n".join(problems)


def test_links_to_pages_take_the_title_of_the_page():
    problems = link_problems(CATALOGS, chinese_titles(CATALOGS))
    assert not problems, "\n".join(problems)


def test_catalog_headers_name_the_book():
    problems = header_problems(CATALOGS)
    assert not problems, "\n".join(problems)


def test_glossary_headwords_are_the_chosen_terms():
    """Each term of the table that has a glossary entry has the chosen Chinese as a headword."""
    by_english = {heads[0].lower(): heads for heads in glossary_entries()}
    missing = [
        f"{term.english}: the glossary's headwords are {heads}, not {term.chinese!r}"
        for term in TERMS
        if (heads := by_english.get(term.english.lower())) and term.chinese not in heads
    ]
    assert not missing, "\n".join(missing)


def test_every_page_has_a_chinese_title():
    titles = chinese_titles(CATALOGS)
    assert set(titles) == set(CATALOGS), sorted(set(CATALOGS) - set(titles))
    assert titles["book/side_by_side"] == "预填充与解码并排对照"


# Each check bites


def _catalog(tmp_path: Path, page: str, pairs: list[tuple[str, str]], header: str | None = None) -> dict:
    """A catalog of `page` in tmp_path with these (msgid, msgstr) pairs, and the book's header
    unless `header` gives another."""
    path = tmp_path / f"{page}.po"
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = {"POT-Creation-Date": "2026-12-02 00:00+0000", "Generated-By": "Babel 2.19.0"}
    text = header if header is not None else i18n.catalog_header(page, fields)
    for msgid, msgstr in pairs:
        text += f'msgid "{msgid}"\nmsgstr "{msgstr}"\n\n'
    path.write_text(text, encoding="utf-8")
    return {page: path}


def test_a_drifted_term_fails(tmp_path):
    catalogs = _catalog(
        tmp_path,
        "book/x",
        [
            ("The KV cache.", "键/值缓存。"),
            ("The cost model.", "代价模型。"),
            ("Step time at batch size 8.", "批量为 8 时的耗时。"),
            ("A roofline.", "一条 roofline。"),
            ("LayerNorm `layer_norm`.", "LayerNorm `layer_norm`。"),
            ("See point 4.", "见要点 4。"),
            ("Solution 1", "解答 1"),
        ],
    )
    problems = term_problems(catalogs)
    found = " ".join(problems)
    for variant in ("键/值缓存", "代价模型", "批量", "roofline", "LayerNorm", "要点 4", "解答"):
        assert repr(variant) in found, (variant, problems)
    assert all(p.startswith("book/x: ") for p in problems)
    assert "'The cost model.'" in found  # the msgid that holds it


def test_a_term_in_code_a_quote_or_a_gloss_is_not_a_variant(tmp_path):
    catalogs = _catalog(
        tmp_path,
        "book/x",
        [
            ("The documents write LayerNorm.", "文档写作“LayerNorm”。"),
            ("F, the FFN width", "前馈网络（FFN）宽度"),
            ("`LayerNorm` runs.", "`LayerNorm` 运行。"),
            ("LayerNorm", "LayerNorm"),  # a glossary's English headword
            ("The KV cache.", "KV 缓存。"),
        ],
    )
    assert term_problems(catalogs) == []


def test_a_reduction_written_as_a_multiple_fails(tmp_path):
    catalogs = _catalog(
        tmp_path,
        "book/x",
        [
            ("int8 saves 2 to 4 times.", "int8 比 bf16 节省 2 到 4 倍。"),
            ("{glue:text}`r` times smaller", "小 {glue:text}`r` 倍"),
            ("many times fewer accesses", "访问次数要少许多倍"),
            ("4 times faster", "至少快 4 倍"),  # a speed-up, not a reduction
            ("a quarter", "降到 1/{glue:text}`r`"),
        ],
    )
    problems = reduction_problems(catalogs)
    assert len(problems) == 3, problems
    assert "节省 2 到 4 倍" in problems[0] and "小 X 倍" in problems[1] and "少许多倍" in problems[2]


def test_a_link_text_that_is_not_the_title_fails(tmp_path):
    titles = {"book/side_by_side": "预填充与解码并排对照", "book/same_answer": "答案不变，计算更少"}
    catalogs = _catalog(
        tmp_path,
        "book/x",
        [
            ("See [](side_by_side.ipynb).", "见[](side_by_side.ipynb)。"),
            ("See [that](side_by_side.ipynb).", "见[预填充与解码并排对比](side_by_side.ipynb)。"),
            ("See [that](same_answer.ipynb).", "见[同样的结果，更少的工作](same_answer.ipynb)。"),
            ("See [it](same_answer.ipynb).", "见[答案不变，计算更少](same_answer.ipynb)。"),
            ("See [the key](intro.md#dimension-key).", "见[维度记号](intro.md#dimension-key)。"),
        ],
    )
    problems = link_problems(catalogs, titles)
    assert len(problems) == 2, problems
    assert "预填充与解码并排对比" in problems[0] and "同样的结果，更少的工作" in problems[1]


def test_a_term_role_with_english_text_fails(tmp_path):
    entries = [("prefill", "预填充"), ("KV cache", "KV 缓存", "缓存"), ("FlashAttention",)]
    catalogs = _catalog(
        tmp_path,
        "book/x",
        [
            ("First {term}`prefill`.", "先做 {term}`prefill`。"),
            ("The {term}`KV cache`.", "{term}`KV cache`。"),
            ("Its {term}`KV cache`.", "它的{term}`cache <KV cache>`。"),
            ("A {term}`KV cache`.", "一个{term}`KV 缓存 <KV cache>`。"),
            ("One {term}`KV cache`.", "一个{term}`KV 缓存`。"),
            ("{term}`FlashAttention`", "{term}`FlashAttention` 内核"),
            ("{term}`prefill`", "{term}`预填充 <pre-fill>`"),
        ],
    )
    problems = term_role_problems(catalogs, entries)
    assert len(problems) == 4, problems
    assert "{term}`预填充 <prefill>`" in problems[0] and "{term}`KV 缓存 <KV cache>`" in problems[1]
    assert "names no glossary entry" in problems[3]


def test_a_placeholder_header_fails(tmp_path):
    placeholder = (
        "# SOME DESCRIPTIVE TITLE.\n# FIRST AUTHOR <EMAIL@ADDRESS>, 2026.\n#\n#, fuzzy\n"
        'msgid ""\nmsgstr ""\n"Project-Id-Version: Project name not set \\n"\n'
        '"Last-Translator: FULL NAME <EMAIL@ADDRESS>\\n"\n"Language: zh_CN\\n"\n\n'
    )
    bad = _catalog(tmp_path, "book/x", [("A", "甲")], header=placeholder)
    problems = header_problems(bad)
    assert "Project name not set" in problems[0] and "FULL NAME" in problems[0], problems
    assert header_problems(_catalog(tmp_path, "book/y", [("A", "甲")])) == []


def test_set_header_fixes_the_header_and_keeps_the_messages(tmp_path):
    placeholder = (
        '# SOME DESCRIPTIVE TITLE.\n#, fuzzy\nmsgid ""\nmsgstr ""\n'
        '"Project-Id-Version: Project name not set \\n"\n"POT-Creation-Date: 2026-12-02 00:25+0000\\n"\n'
        '"PO-Revision-Date: YEAR-MO-DA HO:MI+ZONE\\n"\n"Last-Translator: FULL NAME <EMAIL@ADDRESS>\\n"\n\n'
    )
    catalogs = _catalog(tmp_path, "book/x", [("A", "甲"), ("B", "乙")], header=placeholder)
    path = catalogs["book/x"]
    body = path.read_text(encoding="utf-8").split("\n\n", 1)[1]
    assert i18n.set_header(path, "book/x")
    assert header_problems(catalogs) == []
    assert path.read_text(encoding="utf-8").endswith(body)
    assert "POT-Creation-Date: 2026-12-02 00:25+0000" in path.read_text(encoding="utf-8")
    assert not i18n.set_header(path, "book/x")  # a second time changes nothing
    catalog = i18n.read_catalog(path)
    assert (catalog.project, catalog.version, catalog.fuzzy) == ("kvtutor", "0.1.0", False)


def test_the_chosen_terms_are_used():
    """The table is not vacuous: every chosen rendering occurs in the catalogs."""
    text = " ".join(prose(msgstr) for _, _, msgstr in translations(CATALOGS))
    unused = [t.chinese for t in TERMS if t.chinese != "第 N 点" and t.chinese not in text]
    assert not unused, unused
    assert re.search(r"第 \d 点", text)


#: Words the chapters use that a reader looks up (issue #44), with the Chinese the edition uses.
LOOKED_UP = {"preemption": "抢占", "block table": "块表", "key bucket": "键桶", "launch-bound": "启动受限"}


def glossary_definitions(path: Path = BOOK / "glossary.md") -> dict[str, str]:
    """Each entry's first headword -> its definition (the indented lines after its headwords)."""
    out: dict[str, str] = {}
    for block in re.findall(r"```\{glossary\}\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        head = None
        for line in block.split("\n"):
            if line.strip() and not line.startswith((" ", "\t")):
                head = line.strip() if head is None or head in out else head
            elif head is not None:
                out[head] = f"{out.get(head, '')} {line.strip()}".strip()
    return out


def test_looked_up_words_have_entries_that_link_their_chapter():
    entries = {heads[0]: heads for heads in glossary_entries()}
    definitions = glossary_definitions()
    for english, chinese in LOOKED_UP.items():
        assert chinese in entries.get(english, ()), f"no glossary entry {english} / {chinese}"
        assert re.search(r"\]\([\w/-]+\.ipynb", definitions[english]), f"{english}: links no chapter"
    # the reader of the other edition finds each definition translated
    catalog = {m.id: m.string for m in i18n.messages(i18n.read_catalog(CATALOGS["book/glossary"]))}
    assert all(catalog.get(definitions[e]) for e in LOOKED_UP), "a definition is untranslated"


def test_the_definition_reader_splits_entries(tmp_path):
    path = tmp_path / "glossary.md"
    path.write_text(
        "```{glossary}\nprefill\n预填充\n  One pass.\n  [Prefill](prefill.ipynb).\n\n"
        "decode\n解码\n  Steps.\n```\n",
        encoding="utf-8",
    )
    assert glossary_definitions(path) == {
        "prefill": "One pass. [Prefill](prefill.ipynb).",
        "decode": "Steps.",
    }
