"""The Chinese edition of the book (issue #18): its catalogs and its build.

The Chinese edition is built from the same notebooks and Markdown files as the English one (code,
stored outputs and figures are shared; only the prose differs), with Sphinx's own translation
machinery: the gettext builder extracts every paragraph, heading, table cell and caption of the
English text as a message, sphinx-intl merges the messages into one catalog per page,
locales/zh_CN/LC_MESSAGES/book/<page>.po, and a build with `language: zh_CN` replaces each message
by its translation.

    python tools/i18n.py update       # `make i18n-update`: extract, merge into locales/, report
    python tools/i18n.py build        # part of `make book`: the Chinese edition into _build/html/zh
    python tools/i18n.py status       # how much of each catalog is translated

Code cells, their outputs, math and literal blocks never become messages: Sphinx leaves code and
literal blocks out by itself (gettext_additional_targets is empty), and the book's extension
(tools/sphinxext/kvtutor_i18n.py) marks the rest untranslatable: everything inside a code cell's
output, since myst-nb parses Markdown outputs (tables the code printed) into ordinary paragraphs,
and display math and raw HTML blocks, which Sphinx would extract. Inline math, code spans and
{glue:text} values stay inside the sentence that holds them, and the translation keeps them as
they are (markup_differences; tests/test_i18n.py checks it).

A message that is new or changed in the English text arrives in its catalog empty or marked
fuzzy (sphinx-intl's guess from the old translation, to be checked); messages that left the
English text are dropped (--no-obsolete; git keeps their translations), and so is the catalog of
a page that left the book. tests/test_i18n.py checks that the catalogs match the English text and
are valid, and that every message is translated.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
BUILD = ROOT / "_build"
POT_DIR = BUILD / "gettext"
HTML = BUILD / "html" / "zh"
WORK = BUILD / "zh"
# Sphinx compiles each .po into a .mo beside it; it does so in this copy, so that no build output
# lands in locales/.
LOCALES_COPY = WORK / "locales"
# The Chinese edition's own words for what Sphinx extensions print (the themes and Sphinx itself
# come with Chinese catalogs): myst-nb's buttons on hidden cells, whose {type} is English.
# Its search: Sphinx's "zh" search language, as the book's extension (tools/sphinxext/kvtutor_search.py)
# replaces it, cuts the pages and the reader's query into the same terms (pairs of Chinese characters).
EDITION_SETTINGS = {
    "nb_code_prompt_show": "展开代码单元",
    "nb_code_prompt_hide": "收起代码单元",
    "html_search_language": "zh",
}


def sphinx_build(builder: str, outdir: Path, doctreedir: Path, *, strict: bool, quiet: bool = False,
                 **overrides: object) -> int:  # fmt: skip
    """Run Sphinx as `jupyter-book build . --all [-W -n --keep-going]` does, into `outdir`, with
    Sphinx settings `overrides` on top of _config.yml; the build's exit status."""
    from jupyter_book.sphinx import build_sphinx

    confoverrides = {
        "external_toc_path": (ROOT / "_toc.yml").as_posix(),
        "latex_individualpages": False,
        "nitpicky": strict,
        **overrides,
    }
    result = build_sphinx(
        str(ROOT),
        str(outdir),
        use_external_toc=True,
        noconfig=True,
        path_config=str(ROOT / "_config.yml"),
        confoverrides=confoverrides,
        doctreedir=str(doctreedir),
        builder=builder,
        freshenv=True,
        warningiserror=strict,
        keep_going=strict,
        quiet=quiet,
    )
    if isinstance(result, BaseException):
        print(f"{builder} build failed: {result!r}", file=sys.stderr)
        return 1
    return int(result or 0)


def extract(pot_dir: Path = POT_DIR, quiet: bool = False) -> int:
    """The English messages, one .pot per page, into `pot_dir` (emptied first)."""
    shutil.rmtree(pot_dir, ignore_errors=True)
    doctrees = pot_dir.parent / f".doctrees-{pot_dir.name}"
    return sphinx_build("gettext", pot_dir, doctrees, strict=False, quiet=quiet)


def po_files(locale_dir: Path = LOCALES, language: str = LANGUAGE) -> dict[str, Path]:
    """The catalogs of `language`, by page ("book/intro")."""
    base = locale_dir / language / "LC_MESSAGES"
    return {p.relative_to(base).with_suffix("").as_posix(): p for p in sorted(base.rglob("*.po"))}


def pot_files(pot_dir: Path = POT_DIR) -> dict[str, Path]:
    """The extracted templates, by page."""
    return {p.relative_to(pot_dir).with_suffix("").as_posix(): p for p in sorted(pot_dir.rglob("*.pot"))}


def read_catalog(path: Path) -> Catalog:
    """A .po or .pot file, parsed strictly: a syntax error raises babel's PoFileError."""
    with open(path, "rb") as f:
        return read_po(f, abort_invalid=True)


def messages(catalog: Catalog) -> list:
    """The catalog's messages, without its header and without obsolete ones."""
    return [m for m in catalog if m.id]


def words(text: str) -> int:
    """Words of an English message, as a word processor counts them (markup included)."""
    return len(text.split())


@dataclass
class Progress:
    """How far one catalog is translated."""

    page: str
    total: int
    translated: int
    fuzzy: list[str]
    untranslated: list[str]
    english_words: int

    @property
    def complete(self) -> bool:
        return not self.fuzzy and not self.untranslated


def progress(page: str, catalog: Catalog) -> Progress:
    """Counts of one catalog: a message is translated when it has a translation not marked fuzzy."""
    msgs = messages(catalog)
    fuzzy = [m.id for m in msgs if m.string and m.fuzzy]
    untranslated = [m.id for m in msgs if not m.string]
    return Progress(
        page=page,
        total=len(msgs),
        translated=len(msgs) - len(fuzzy) - len(untranslated),
        fuzzy=fuzzy,
        untranslated=untranslated,
        english_words=sum(words(m.id) for m in msgs),
    )


def incomplete(catalogs: dict[str, Path], show: int = 3) -> list[str]:
    """One line per catalog with an untranslated or fuzzy message: its file and first few msgids."""
    lines = []
    for page, path in catalogs.items():
        p = progress(page, read_catalog(path))
        if p.complete:
            continue
        shown = [f"untranslated {m!r}" for m in p.untranslated[:show]]
        shown += [f"fuzzy {m!r}" for m in p.fuzzy[: max(0, show - len(shown))]]
        shown = [s if len(s) < 100 else s[:96] + "...'" for s in shown]
        lines.append(
            f"{_rel(path)}: {len(p.untranslated)} untranslated, {len(p.fuzzy)} fuzzy of {p.total}: "
            + "; ".join(shown)
        )
    return lines


def obsolete(catalogs: dict[str, Path]) -> list[str]:
    """One line per catalog that keeps obsolete (#~) messages."""
    lines = []
    for path in catalogs.values():
        old = list(read_catalog(path).obsolete)
        if old:
            lines.append(f"{_rel(path)}: {len(old)} obsolete (#~) message(s), e.g. {old[0]!r}")
    return lines


def out_of_date(templates: dict[str, Path], catalogs: dict[str, Path]) -> list[str]:
    """Where the catalogs do not hold exactly the messages of the English text: a page without a
    catalog, a catalog without a page, a message missing from a catalog or left in it."""
    lines = [f"no catalog for page {page}" for page in templates if page not in catalogs]
    lines += [f"{_rel(catalogs[page])}: the page is no longer in the book" for page in catalogs
              if page not in templates]  # fmt: skip
    for page in templates.keys() & catalogs.keys():
        english = {m.id for m in messages(read_catalog(templates[page]))}
        held = {m.id for m in messages(read_catalog(catalogs[page]))}
        missing, stale = sorted(english - held), sorted(held - english)
        if missing or stale:
            example = (missing or stale)[0]
            lines.append(
                f"{_rel(catalogs[page])}: {len(missing)} message(s) of the English text missing, "
                f"{len(stale)} no longer in it, e.g. {example[:80]!r}"
            )
    return sorted(lines)


# What a translation keeps exactly as the English has it, found in this order (each kind is taken
# out of the text before the next is looked for): glued values (a number typed in by hand would
# go stale), citations, references to pages, sections and equations (their targets: the text may
# change), code spans, inline math, link targets. {term} may name the Chinese entry of the
# glossary instead, once per English one; {other-edition} and other roles may change their text.
KEPT = {
    "glue": re.compile(r"\{glue(?::\w+)?\}`[^`]*`"),
    "cite": re.compile(r"\{cite(?::\w+)?\}`[^`]*`"),
    "reference": re.compile(r"\{(?:doc|ref|numref|eq)\}`[^`]*`"),
    "role": re.compile(r"\{[\w:-]+\}`[^`]*`"),
    "code": re.compile(r"``.+?``|`[^`]+`"),
    "math": re.compile(r"\$[^$]+\$"),
    "link": re.compile(r"\]\(([^)\s]+)\)"),
}
TERM = re.compile(r"\{term\}`")


def _target(found: str) -> str:
    """A reference with its own text, {doc}`Title <page>`, as the reference alone: {doc}`page`."""
    match = re.fullmatch(r"(\{[\w:-]+\}`)[^`]*<([^`>]+)>`", found)
    return f"{match.group(1)}{match.group(2)}`" if match else found


def markup_differences(msgid: str, msgstr: str) -> list[str]:
    """What of the English message's markup its translation lost or changed (KEPT, {term})."""
    problems = []
    english, translation = msgid, msgstr
    for kind, pattern in KEPT.items():
        found_english = Counter(map(_target, pattern.findall(english)))
        found_translation = Counter(map(_target, pattern.findall(translation)))
        if kind != "role":  # any other role ({term}, {sub-ref}, ...): only counted, below
            missing = found_english - found_translation
            problems += [f"{kind} {f'({m})' if kind == 'link' else m} missing" for m in sorted(missing)]
        english, translation = pattern.sub(" ", english), pattern.sub(" ", translation)
    terms = len(TERM.findall(msgid)), len(TERM.findall(msgstr))
    if terms[0] != terms[1]:
        problems.append(f"{{term}} roles: {terms[0]} in the English, {terms[1]} in the translation")
    return problems


def _rel(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


# Every catalog's header (the `msgid ""` entry and the comment above it): the book's name and
# version from pyproject.toml, and who translates it, in place of the placeholders that Sphinx
# and sphinx-intl write into a new catalog ("Project name not set", "FULL NAME <EMAIL@ADDRESS>").
# `update` sets it on every catalog it merges; its creation date is the template's, and its
# revision date is kept once set.
TRANSLATOR = "The kvtutor authors <https://github.com/kvtutor/kvtutor>"
LANGUAGE_TEAM = "Chinese (zh_CN) <https://github.com/kvtutor/kvtutor>"
BUGS = "https://github.com/kvtutor/kvtutor/issues"
PLACEHOLDERS = ("Project name not set", "PACKAGE VERSION", "FULL NAME", "EMAIL@ADDRESS",
                "FIRST AUTHOR", "SOME DESCRIPTIVE TITLE", "YEAR-MO-DA", "LL@li.org")  # fmt: skip


def project_version() -> tuple[str, str]:
    """The package's name and version, as pyproject.toml gives them."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["name"], project["version"]


def catalog_header(page: str, fields: dict[str, str], language: str = LANGUAGE,
                   revised: str | None = None) -> str:  # fmt: skip
    """The header of `page`'s catalog ("book/gqa"), with the dates of `fields` (the header's
    current fields, by name) kept unless `revised` gives a new revision date: the text up to
    the first message, blank line included."""
    name, version = project_version()
    year = fields.get("POT-Creation-Date", "")[:4] or "2026"
    revised = revised or fields.get("PO-Revision-Date", "")
    if not revised or "YEAR" in revised:
        revised = fields.get("POT-Creation-Date", "")
    values = {
        "Project-Id-Version": f"{name} {version}",
        "Report-Msgid-Bugs-To": BUGS,
        "POT-Creation-Date": fields.get("POT-Creation-Date", ""),
        "PO-Revision-Date": revised,
        "Last-Translator": TRANSLATOR,
        "Language": language,
        "Language-Team": LANGUAGE_TEAM,
        "Plural-Forms": fields.get("Plural-Forms", "nplurals=1; plural=0;"),
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Transfer-Encoding": "8bit",
        "Generated-By": fields.get("Generated-By", "Babel"),
    }
    lines = [
        f"# Chinese ({language}) translation of {name}: {page}.",
        f"# Copyright (C) {year} The {name} authors",
        f"# This file is distributed under the same license as the {name} package.",
        "#",
        'msgid ""',
        'msgstr ""',
        *(f'"{key}: {value}\\n"' for key, value in values.items()),
    ]
    return "\n".join(lines) + "\n\n"


def set_header(path: Path, page: str, language: str = LANGUAGE, revised: str | None = None) -> bool:
    """Gives the catalog at `path` the book's header (catalog_header; `revised`, as
    "2026-12-02 01:30+0000", sets its revision date); whether the file changed. Only the
    header is rewritten: the messages stay byte for byte as they were."""
    text = path.read_text(encoding="utf-8")
    start = re.search(r'^msgid ""\nmsgstr ""\n((?:".*"\n)*)', text, re.M)
    if start is None:
        raise ValueError(f"{_rel(path)}: no header entry")
    fields = dict(re.findall(r'^"([\w-]+): ?(.*?)\s*\\n"$', start.group(1), re.M))
    body = text[start.end() :].lstrip("\n")
    new = catalog_header(page, fields, language, revised) + body
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def update(language: str = LANGUAGE, pages: list[str] | None = None) -> int:
    """`make i18n-update`: extract the English messages and merge them into the catalogs.

    With `pages` (e.g. ["book/decode"]) only those pages' catalogs are merged, from templates
    extracted into a folder of their own, so that edits of different pages can be merged at once.
    """
    pot_dir = POT_DIR if pages is None else BUILD / f"gettext-{os.getpid()}"
    status = extract(pot_dir)
    if status:
        return status
    templates = pot_files(pot_dir)
    if not templates:
        print(f"no messages extracted into {_rel(pot_dir)}", file=sys.stderr)
        return 1
    if pages is not None:
        unknown = sorted(set(pages) - set(templates))
        if unknown:
            print(f"--pages: no such page in the book: {', '.join(unknown)}", file=sys.stderr)
            return 1
        for page, path in templates.items():
            if page not in pages:
                path.unlink()
    cmd = [sys.executable, "-m", "sphinx_intl", "update", "--pot-dir", str(pot_dir),
           "--locale-dir", str(LOCALES), "--language", language, "--line-width", "0",
           "--no-obsolete", "--jobs", "1"]  # fmt: skip
    print(" ".join(["sphinx-intl", *cmd[3:]]).replace(str(ROOT) + os.sep, ""))
    subprocess.run(cmd, check=True, cwd=ROOT)
    # sphinx-intl keeps the header of a catalog it merges, but a new catalog gets the template's.
    merged = {page: path for page, path in po_files(language=language).items()
              if page in templates and (pages is None or page in pages)}  # fmt: skip
    for page, path in merged.items():
        set_header(path, page, language)
    if pages is not None:
        shutil.rmtree(pot_dir, ignore_errors=True)
        report(merged)
        return 0
    for page, path in po_files(language=language).items():
        if page not in templates:
            print(f"Delete: {_rel(path)} (the page is no longer in the book)")
            path.unlink()
    report(po_files(language=language))
    return 0


def toc_pages() -> list[str]:
    """Every page named in _toc.yml (root, parts, chapters, sections), without suffix: the pages
    each edition builds (the catalogs' test and the browser check both walk this list)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]

    def walk(entries: list[dict] | None) -> None:
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts") or []:
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [re.sub(r"\.(md|ipynb|rst)$", "", page) for page in pages]


def book_title(language: str = LANGUAGE) -> str | None:
    """The book's title (_config.yml) as the root page's catalog translates it, if it does."""
    import yaml

    title = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")).get("title")
    catalog = po_files(language=language).get(toc_pages()[0])
    if not title or catalog is None:
        return title
    message = read_catalog(catalog).get(title)
    return message.string if message is not None and message.string and not message.fuzzy else title


def build(language: str = LANGUAGE) -> int:
    """The Chinese edition into _build/html/zh, as strict as the English one (-W -n --keep-going).

    Built in _build/zh and moved into place, since myst-nb writes its files beside the HTML
    folder. In one process: Sphinx's -j reads serially anyway (sphinx-multitoc-numbering does
    not declare itself parallel-safe), and its warning about that fails the strict build."""
    shutil.rmtree(LOCALES_COPY, ignore_errors=True)
    shutil.copytree(LOCALES / language, LOCALES_COPY / language)
    shutil.rmtree(WORK / "html", ignore_errors=True)
    status = sphinx_build(
        "html",
        WORK / "html",
        WORK / "doctrees",
        strict=True,
        language=language,
        locale_dirs=[LOCALES_COPY.relative_to(ROOT).as_posix()],
        html_title=book_title(language),
        **EDITION_SETTINGS,
    )
    shutil.rmtree(HTML, ignore_errors=True)
    if (WORK / "html").is_dir():
        HTML.parent.mkdir(parents=True, exist_ok=True)
        (WORK / "html").rename(HTML)
    return status


def report(catalogs: dict[str, Path], file=None) -> list[Progress]:
    """Prints one line per catalog and a total; returns the counts."""
    rows = [progress(page, read_catalog(path)) for page, path in catalogs.items()]
    width = max([len(r.page) for r in rows] + [5])
    print(f"{'page':<{width}} {'messages':>8} {'words':>6} {'done':>5} {'fuzzy':>5} {'empty':>5}", file=file)
    for r in rows:
        print(f"{r.page:<{width}} {r.total:>8} {r.english_words:>6} {r.translated:>5} "
              f"{len(r.fuzzy):>5} {len(r.untranslated):>5}", file=file)  # fmt: skip
    total = sum(r.total for r in rows)
    done = sum(r.translated for r in rows)
    print(f"{'total':<{width}} {total:>8} {sum(r.english_words for r in rows):>6} {done:>5} "
          f"{sum(len(r.fuzzy) for r in rows):>5} {sum(len(r.untranslated) for r in rows):>5}"
          f"  ({100 * done / max(total, 1):.0f}% translated)", file=file)  # fmt: skip
    return rows


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    u = sub.add_parser("update", help="extract the English messages and merge them into locales/")
    u.add_argument("--pages", nargs="+", metavar="PAGE", help="merge only these catalogs (book/decode ...)")
    sub.add_parser("build", help="build the Chinese edition into _build/html/zh (strict)")
    e = sub.add_parser("extract", help="only extract the English messages (.pot)")
    e.add_argument("--out", type=Path, default=POT_DIR, help=f"folder (default {_rel(POT_DIR)})")
    e.add_argument("-q", "--quiet", action="store_true")
    sub.add_parser("status", help="how much of each catalog is translated")
    args = parser.parse_args(None if argv is None else list(argv))
    if args.command == "update":
        return update(pages=args.pages)
    if args.command == "build":
        return build()
    if args.command == "extract":
        return extract(args.out.resolve(), quiet=args.quiet)
    report(po_files())
    return 0


if __name__ == "__main__":
    sys.exit(main())
