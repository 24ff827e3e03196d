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


def test_stored_notebooks_are_already_clean(tmp_path):
    """make notebooks cleans what it stores: cleaning a stored notebook again changes nothing."""
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        copy = tmp_path / path.name
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        assert clean_outputs["clean"](str(copy)) is False, path.name


def test_consecutive_stream_outputs_are_joined(tmp_path):
    out1 = {"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]}
    out2 = {"output_type": "stream", "name": "stdout", "text": ["c\n"]}
    err = {"output_type": "stream", "name": "stderr", "text": ["e\n"]}
    out3 = {"output_type": "stream", "name": "stdout", "text": "d\n"}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(_notebook([out1, out2, err, out3])))
    assert clean_outputs["clean"](str(path)) is True
    outs = json.loads(path.read_text())["cells"][0]["outputs"]
    assert outs == [
        {"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n", "c\n"]},
        err,
        {"output_type": "stream", "name": "stdout", "text": "d\n"},
    ]
