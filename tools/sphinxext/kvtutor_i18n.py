"""Sphinx extension for the book's two editions, English and Chinese (issue #18).

_config.yml loads it (`sphinx.local_extensions`) in every build of the book. `make book` builds
the English edition into _build/html and the Chinese one, from the same sources with
`language: zh_CN` and the catalogs in locales/, into _build/html/zh (tools/i18n.py). Here:

- every page links to the same page in the other edition, at the top right of the article
  (and names it in a `<link rel="alternate" hreflang=...>` in its head);
- the role {other-edition}`text` links the current page's counterpart in the other edition: the
  intro's sentence that says which edition this is uses it, and stays a translatable message;
- the outputs of code cells never become messages. myst-nb parses a Markdown output (a table that
  the code printed) into ordinary paragraphs and tables, which the gettext builder would extract
  like prose; outputs are computed, shared by both editions, and stay as the code printed them.
  Nor do display math ($$...$$) and raw HTML blocks, which Sphinx would extract (KeepOutOfCatalogs);
- {glue:text} and {glue} work inside translated messages (TranslatedGlue below), and so do the
  captions of the parts of the table of contents (TranslateTocCaptions);
- in the Chinese edition, what code cells print is shown in Chinese (TranslatePrintedOutputs).

The Chinese edition's search is kvtutor_search.py's.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from docutils import nodes
from myst_nb.ext.glue import roles as glue_roles
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

# The translated edition: its language and its folder inside the English edition's HTML.
TRANSLATED_LANGUAGE = "zh_CN"
EDITION_DIR = "zh"
# How each edition's link names the other one, in the other one's language.
SWITCH_LABEL = {"en": "中文", TRANSLATED_LANGUAGE: "English"}
HREFLANG = {"en": "en", TRANSLATED_LANGUAGE: "zh-CN"}


def edition(language: str | None) -> str:
    """The edition a build with this Sphinx `language` makes: TRANSLATED_LANGUAGE or "en"."""
    return TRANSLATED_LANGUAGE if (language or "").replace("-", "_") == TRANSLATED_LANGUAGE else "en"


def counterpart_uri(docname: str, language: str | None, suffix: str = ".html") -> str:
    """The relative URL, from page `docname` of the edition built with `language`, of the same
    page in the other edition: "book/intro" -> "../zh/book/intro.html" from the English edition,
    "../../book/intro.html" from the Chinese one (which lives in EDITION_DIR)."""
    up = "../" * docname.count("/")
    if edition(language) == TRANSLATED_LANGUAGE:
        return f"{up}../{docname}{suffix}"
    return f"{up}{EDITION_DIR}/{docname}{suffix}"


def other_edition(language: str | None) -> str:
    """The edition the counterpart links lead to."""
    return "en" if edition(language) == TRANSLATED_LANGUAGE else TRANSLATED_LANGUAGE


def other_edition_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: dict | None = None,
    content: Any = (),
) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """{other-edition}`text`: a link to this page in the other edition."""
    env = inliner.document.settings.env
    suffix = env.config.html_file_suffix or ".html"
    node = nodes.reference(
        rawtext, text, refuri=counterpart_uri(env.docname, env.config.language, suffix), internal=False
    )
    node["classes"].append("kvtutor-other-edition")
    return [node], []


class KeepOutOfCatalogs(SphinxTransform):
    """Marks untranslatable, before Sphinx's Locale transform (priority 20) translates the rest and
    before the gettext builder extracts it: every text node inside a code cell's output, and every
    math block and raw block (Sphinx leaves code and literal blocks out by itself, but not these).
    A kind named in gettext_additional_targets is made translatable again after this (priority 10)."""

    default_priority = 5

    def apply(self, **kwargs: Any) -> None:
        for container in self.document.findall(nodes.container):
            if container.get("nb_element") == "cell_code_output":
                for node in container.findall(nodes.TextElement):
                    node["translatable"] = False
        for node in self.document.findall(lambda n: isinstance(n, (nodes.math_block, nodes.raw))):
            node["translatable"] = False


class TranslatePrintedOutputs(SphinxTransform):
    """In the Chinese edition, what code cells printed (their stream and plain-text outputs) in
    Chinese, line by line, by kvtutor.book.printed (the stored outputs, which nbval compares, stay
    in English). Each becomes the HTML Sphinx would write for it, with every run of Chinese
    characters two columns wide per character, so that printed tables stay aligned. Errors
    (tracebacks) and stderr stay as printed."""

    default_priority = 6

    def apply(self, **kwargs: Any) -> None:
        if edition(self.config.language) != TRANSLATED_LANGUAGE:
            return
        from kvtutor.book.printed import chinese_output, printed_html

        for container in self.document.findall(nodes.container):
            if container.get("nb_element") != "cell_code_output":
                continue
            for block in list(container.findall(nodes.literal_block)):
                classes = block.get("classes", [])
                if (
                    "output" not in classes
                    or not {"stream", "text_plain"} & set(classes)
                    or "stderr" in classes
                ):
                    continue
                text = block.astext()
                zh, _ = chinese_output(text)
                if zh == text or "\x1b[" in text:
                    continue
                language = block.get("language", "none")
                wrapper = f"{' '.join(classes)} highlight-{language} notranslate"
                markup = (
                    f'<div class="{wrapper}"><div class="highlight">'
                    f"<pre><span></span>{printed_html(zh)}</pre></div></div>"
                )
                block.replace_self(nodes.raw("", markup, format="html"))


class TranslateTocCaptions(SphinxTransform):
    """Translates the captions of the table of contents' parts ("Start here", ...).

    The gettext builder extracts them into the root page's catalog, but sphinx-external-toc
    inserts the toctrees (priority 100) after Sphinx's Locale transform (20) has translated the
    page; this runs after the insertion and before Sphinx collects the toctrees (880)."""

    default_priority = 101

    def apply(self, **kwargs: Any) -> None:
        toctrees = [t for t in self.document.findall(addnodes.toctree) if t.get("rawcaption")]
        if not toctrees or edition(self.config.language) != TRANSLATED_LANGUAGE:
            return
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        dirs = [str(self.env.srcdir / d) for d in self.config.locale_dirs]
        catalog, found = init_locale(dirs, self.config.language, domain)
        if not found:
            return
        for toctree in toctrees:
            caption = toctree["rawcaption"]
            toctree.apply_translated_message(caption, catalog.gettext(caption))


def add_edition_switch(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: nodes.document | None
) -> None:
    """Puts the link to the other edition at the top of every page built from a source."""
    if doctree is None or pagename not in app.env.all_docs or "body" not in context:
        return
    language = app.config.language
    target = other_edition(language)
    href = counterpart_uri(pagename, language, app.builder.out_suffix)
    hreflang = HREFLANG[target]
    context["body"] = (
        f'<p class="kvtutor-edition-switch" style="float: right; margin: 0 0 0 1em">'
        f'<a class="reference external" href="{href}" hreflang="{hreflang}" lang="{hreflang}">'
        f"{SWITCH_LABEL[edition(language)]}</a></p>\n" + context["body"]
    )
    context["metatags"] = (
        context.get("metatags", "") + f'\n<link rel="alternate" hreflang="{hreflang}" href="{href}" />'
    )


class TranslatedGlue:
    """Glue roles that also work in a translated message.

    myst-nb pastes `{glue:text}`key`` from the notebook being parsed, which it holds only while
    it parses the notebook; Sphinx parses each translated message afterwards, on its own, as
    Markdown. There the role becomes `{glue:text}`<this notebook>::key:format``, the reference
    that myst-nb resolves from the glue data it saved while parsing the notebook, so translators
    copy the roles as they are. Outside a translated message nothing changes."""

    # {glue:text} splits the format off at the last colon, so a reference needs one ("s": str()).
    default_format = ""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        document = self.document  # type: ignore[attr-defined]
        text = self.text  # type: ignore[attr-defined]
        if "nb_renderer" not in document and "::" not in text:
            env = document.settings.env
            source = PurePosixPath(env.doc2path(env.docname, False))
            if source.suffix == ".ipynb":
                suffix = "" if ":" in text else self.default_format
                self.text = f"{source.name}::{text}{suffix}"
        return super().run()  # type: ignore[misc]


class TranslatedPasteTextRole(TranslatedGlue, glue_roles.PasteTextRole):
    """{glue:text}, also in translated messages."""

    default_format = ":s"


class TranslatedPasteRoleAny(TranslatedGlue, glue_roles.PasteRoleAny):
    """{glue} and {glue:any}, also in translated messages."""


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("myst_nb")  # its glue domain, whose roles are replaced here
    app.add_role_to_domain("glue", "text", TranslatedPasteTextRole(), override=True)
    for name in ("", "any"):
        app.add_role_to_domain("glue", name, TranslatedPasteRoleAny(), override=True)
    app.add_role("other-edition", other_edition_role)
    app.add_transform(KeepOutOfCatalogs)
    app.add_transform(TranslateTocCaptions)
    app.add_transform(TranslatePrintedOutputs)
    app.connect("html-page-context", add_edition_switch)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
