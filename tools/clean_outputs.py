"""Undo what re-executing a notebook makes differently every time, so stored outputs stay deterministic.

- A displayed ipywidget stores a fresh random ``model_id`` (application/vnd.jupyter.widget-view+json)
  on every run, and with no widget state stored it renders nothing on the web page anyway; its
  text/plain description, which nbval compares, is kept.
- Printed text arrives in one stream output or in several, depending on when the kernel flushed;
  consecutive outputs of the same stream are joined into one.

Run by ``make notebooks`` after executing.
"""

from __future__ import annotations

import json
import sys

WIDGET = "application/vnd.jupyter.widget-view+json"


def _as_list(text: str | list[str]) -> list[str]:
    return [text] if isinstance(text, str) else list(text)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def clean(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    nb = json.loads(text)
    changed = False
    for cell in nb["cells"]:
        merged: list[dict] = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET in data and "text/plain" in data:
                del data[WIDGET]
                changed = True
            prev = merged[-1] if merged else None
            if (
                prev is not None
                and out.get("output_type") == prev.get("output_type") == "stream"
                and out.get("name") == prev.get("name")
            ):
                prev["text"] = _lines("".join(_as_list(prev["text"]) + _as_list(out["text"])))
                changed = True
                continue
            merged.append(out)
        if "outputs" in cell:
            cell["outputs"] = merged
    if changed:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        if clean(p):
            print(f"{p}: cleaned (widget model ids, split streams)")
