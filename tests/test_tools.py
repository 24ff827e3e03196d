"""The build tools in tools/: stored notebook outputs stay deterministic."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
clean_outputs = runpy.run_path(str(ROOT / "tools" / "clean_outputs.py"))


def _notebook(outputs):
    cell = {"cell_type": "code", "metadata": {}, "source": [], "outputs": outputs, "execution_count": 1}
    return {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_widget_model_ids_are_dropped_and_text_kept(tmp_path):
    widget = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
              "data": {clean_outputs["WIDGET"]: {"model_id": "abc", "version_major": 2},
                       "text/plain": ["VBox(...)"]}}  # fmt: skip
    plain = {"output_type": "stream", "name": "stdout", "text": ["hi\n"]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(_notebook([widget, plain])))
    assert clean_outputs["clean"](str(path)) is True
    outs = json.loads(path.read_text())["cells"][0]["outputs"]
    assert outs[0]["data"] == {"text/plain": ["VBox(...)"]}
    assert outs[1] == plain
    assert clean_outputs["clean"](str(path)) is False  # nothing left to drop: the file is untouched


def test_stored_notebooks_hold_no_widget_model_ids():
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        assert clean_outputs["WIDGET"] not in path.read_text(encoding="utf-8"), path.name
