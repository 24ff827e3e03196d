"""Drop what re-executing a notebook makes differently every time, so stored outputs stay deterministic.

A displayed ipywidget stores a fresh random ``model_id`` (application/vnd.jupyter.widget-view+json)
on every run, and with no widget state stored it renders nothing on the web page anyway; its
text/plain description, which nbval compares, is kept. Run by ``make notebooks`` after executing.
"""

from __future__ import annotations

import json
import sys

WIDGET = "application/vnd.jupyter.widget-view+json"


def clean(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    nb = json.loads(text)
    changed = False
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET in data and "text/plain" in data:
                del data[WIDGET]
                changed = True
    if changed:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        if clean(p):
            print(f"{p}: dropped widget model ids")
