"""Sphinx extension: every page loads each inline script once.

Sphinx 7.4 writes an inline script (``app.add_js_file(None, body=...)``) that an extension adds
after the builder has started twice into every page: once from the builder's own list and once
from the registry, which ``prepare_writing`` adds again under the file name ``""`` instead of
``None``, so the two copies do not compare equal (sphinx-doc/sphinx#13402, fixed in Sphinx 8,
which Jupyter Book 1.x cannot use). sphinx-thebe's script declares ``const THEBE_JS_URL``, and
its second copy fails in every browser with "Identifier 'THEBE_JS_URL' has already been
declared" (sphinx-togglebutton's ``var togglebuttonSelector`` is written twice too, silently).

_config.yml loads this extension (``sphinx.local_extensions``) in both editions' builds. Just
before a page is rendered, it drops every script that repeats an earlier one: the same file
(``None`` and ``""`` alike), priority and attributes, an inline script's body included.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def script_key(script: Any) -> tuple:
    """What makes two of a page's scripts the same: file (no file: ""), priority, attributes."""
    attributes = getattr(script, "attributes", {}) or {}
    return (
        getattr(script, "filename", None) or "",
        getattr(script, "priority", 500),
        tuple(sorted((k, str(v)) for k, v in attributes.items())),
    )


def unique_scripts(scripts: list) -> list:
    """`scripts` without the ones that repeat an earlier one (script_key), in their order."""
    seen: set[tuple] = set()
    kept = []
    for script in scripts:
        key = script_key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    return kept


def drop_repeated_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        scripts[:] = unique_scripts(scripts)


def setup(app: Sphinx) -> dict[str, Any]:
    # After every other handler (the default priority is 500), so that scripts they add count too.
    app.connect("html-page-context", drop_repeated_scripts, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
