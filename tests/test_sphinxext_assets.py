"""tools/sphinxext/kvtutor_assets.py: each of a page's scripts once (issue #35).

Sphinx 7.4 lists an inline script that an extension adds after the builder has started twice, once
under the file name None and once under "": sphinx-thebe's `const THEBE_JS_URL` then throws in
every browser. The extension drops the second copy; these tests feed it Sphinx's own script
objects.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sphinx.builders.html._assets import _JavaScript

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = ROOT / "tools" / "sphinxext" / "kvtutor_assets.py"
_spec = importlib.util.spec_from_file_location("_kvtutor_assets", EXTENSION)
assert _spec is not None and _spec.loader is not None
assets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assets)

THEBE = 'const THEBE_JS_URL = "https://unpkg.com/thebe@0.8.2/lib/index.js"'


def test_a_repeated_inline_script_is_dropped_and_the_order_kept():
    scripts = [
        _JavaScript("_static/doctools.js", priority=200),
        _JavaScript(None, priority=500, body=THEBE),  # the builder's copy
        _JavaScript("_static/sphinx-thebe.js", priority=500, **{"async": "async"}),
        _JavaScript("", priority=500, body=THEBE),  # the registry's copy, prepare_writing
    ]
    assert scripts[1] != scripts[3]  # why Sphinx keeps both
    kept = assets.unique_scripts(scripts)
    assert kept == scripts[:3]


def test_different_scripts_are_all_kept():
    scripts = [
        _JavaScript(None, body="let a = 1"),
        _JavaScript(None, body="let b = 2"),
        _JavaScript("_static/a.js"),
        _JavaScript("_static/a.js", priority=800),  # another priority: another entry
        _JavaScript("_static/a.js", **{"defer": "defer"}),
    ]
    assert assets.unique_scripts(scripts) == scripts


def test_the_page_context_is_changed_in_place():
    scripts = [_JavaScript(None, body=THEBE), _JavaScript("", body=THEBE)]
    context = {"script_files": scripts}
    assets.drop_repeated_scripts(None, "book/intro", "page.html", context, None)
    assert context["script_files"] is scripts and len(scripts) == 1
    assets.drop_repeated_scripts(None, "search", "search.html", {}, None)  # no scripts: nothing to do
