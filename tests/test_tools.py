"""The build tools: stored notebook outputs stay deterministic (tools/), and the browser check
finds an installed Chromium or says what to install (tests/browser/chromium.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

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


# ------------------------------------------------- the browser lookup (tests/browser/chromium.py)

CHROMIUM_PY = ROOT / "tests" / "browser" / "chromium.py"
_spec = importlib.util.spec_from_file_location("_kvtutor_chromium", CHROMIUM_PY)
chromium = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chromium)


def _fake_browser(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv(chromium.ENV_VAR, raising=False)


@pytest.mark.skipif(sys.platform == "win32", reason="executable bits and shell scripts")
@pytest.mark.parametrize("name", chromium.NAMES)
def test_chromium_found_on_path_by_each_name(tmp_path, monkeypatch, no_override, name):
    browser = _fake_browser(tmp_path / "bin", name)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert chromium.find_chromium(mac_apps=()) == str(browser)


@pytest.mark.skipif(sys.platform == "win32", reason="executable bits and shell scripts")
def test_chromium_path_order_and_non_executables(tmp_path, monkeypatch, no_override):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (first / "chromium").write_text("not executable")  # skipped: no x bit
    chrome = _fake_browser(first, "google-chrome")
    _fake_browser(second, "chromium-browser")
    monkeypatch.setenv("PATH", os.pathsep.join([str(first), str(second)]))
    # the order of NAMES wins over the order of PATH: chromium-browser before google-chrome
    assert chromium.find_chromium(mac_apps=()) == str(second / "chromium-browser")
    monkeypatch.setenv("PATH", str(first))
    assert chromium.find_chromium(mac_apps=()) == str(chrome)


@pytest.mark.skipif(sys.platform == "win32", reason="executable bits and shell scripts")
def test_chromium_override_by_path_or_name(tmp_path, monkeypatch, no_override):
    _fake_browser(tmp_path / "bin", "chromium")
    mine = _fake_browser(tmp_path / "elsewhere", "my-chrome")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv(chromium.ENV_VAR, str(mine))
    assert chromium.find_chromium() == str(mine)  # the override beats PATH
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "bin"), str(tmp_path / "elsewhere")]))
    monkeypatch.setenv(chromium.ENV_VAR, "my-chrome")  # a command name is looked up on PATH
    assert chromium.find_chromium() == str(mine)
    monkeypatch.setenv(chromium.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(chromium.ChromiumNotFound, match="KVTUTOR_CHROMIUM=.*missing.*not an executable"):
        chromium.find_chromium()  # a wrong override fails instead of falling back silently


@pytest.mark.skipif(sys.platform == "win32", reason="executable bits and shell scripts")
def test_chromium_mac_app_after_path(tmp_path, monkeypatch, no_override):
    app = _fake_browser(tmp_path / "Google Chrome.app" / "Contents" / "MacOS", "Google Chrome")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert chromium.find_chromium(mac_apps=(str(tmp_path / "nope"), str(app))) == str(app)
    path_browser = _fake_browser(tmp_path / "bin", "chromium")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert chromium.find_chromium(mac_apps=(str(app),)) == str(path_browser)


def test_chromium_missing_says_what_to_install(tmp_path, monkeypatch, no_override):
    env = {"PATH": str(tmp_path)}
    with pytest.raises(chromium.ChromiumNotFound) as info:
        chromium.find_chromium(env, mac_apps=())
    message = str(info.value)
    assert "\n" not in message and "apt-get install chromium" in message and chromium.ENV_VAR in message
    # the script form (what `make chromium` runs): one line on stderr, exit status 1
    script = subprocess.run(
        [sys.executable, str(CHROMIUM_PY)],
        env={**os.environ, "PATH": str(tmp_path), chromium.ENV_VAR: ""},
        capture_output=True,
        text=True,
    )
    if sys.platform == "darwin" and script.returncode == 0:
        pytest.skip("a macOS app bundle is installed")
    assert (script.returncode, script.stdout, script.stderr) == (1, "", message + "\n")


def test_the_browser_tests_use_the_lookup():
    conftest = (ROOT / "tests" / "browser" / "conftest.py").read_text(encoding="utf-8")
    assert "chromium.find_chromium()" in conftest and "/usr/bin/chromium" not in conftest
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "tests/browser/chromium.py" in makefile and "playwright install" not in makefile


def test_an_unknown_command_is_a_usage_error_on_stderr(capsys):
    from kvtutor.__main__ import main

    assert main(["BENCH"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: python -m kvtutor COMMAND" in err
    assert err.rstrip().endswith("error: COMMAND: expected one of ['bench', 'kv-memory'], got 'BENCH'")
    assert main(["--help"]) == 0 and "commands:" in capsys.readouterr().out
