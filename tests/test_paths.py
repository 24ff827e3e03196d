"""Paths stay home: a name under ``kvtutor/data/runs`` resolves there or is refused (``..``, an
absolute path, a symbolic link that leads out), a recorded file is read strictly and named when it
is wrong, and what the benchmark writes is checked before the run and written whole or not at
all (no ``.tmp`` file, no directory left behind)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import kvtutor
from kvtutor.bench.common import check_output_path, write_atomically
from kvtutor.measure import recorded, schema

RUNS = Path(kvtutor.__file__).parent / recorded.RUNS


# ---------------------------------------------------------------- reading under data/runs


@pytest.mark.parametrize(
    "name",
    [
        "h200-2026-11-30/../../configs/gpt2.json",
        "../configs/gpt2.json",
        "..",
        "./bench-cpu.json",
        "/etc/passwd",
        str(RUNS / "bench-cpu.json"),  # absolute, even inside
        "h200-2026-11-30//kernels.txt",
        "h200-2026-11-30\\..\\..\\configs\\gpt2.json",
        "C:/Windows/win.ini",
        "",
    ],
)
def test_run_path_refuses_a_name_that_could_leave_the_runs(name):
    with pytest.raises(ValueError, match=r"^name: expected a file name under data/runs, got "):
        recorded.run_path(name)


def test_run_path_refuses_what_is_not_a_name():
    for bad in (None, Path("bench-cpu.json"), ["bench-cpu.json"]):
        with pytest.raises(TypeError, match=r"^name: expected a file name under data/runs, got "):
            recorded.run_path(bad)


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A folder of runs in place of the package's, beside a secret it must not reach."""
    root, outside = tmp_path / "runs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text('{"secret": 1}', encoding="utf-8")
    monkeypatch.setattr(recorded, "_runs_root", lambda: root)
    return root, outside


def test_a_symbolic_link_out_of_the_runs_is_refused_and_one_inside_is_followed(runs):
    root, outside = runs
    (root / "inside.json").write_text('{"inside": 1}', encoding="utf-8")
    (root / "to-secret.json").symlink_to(outside / "secret.json")
    (root / "folder").symlink_to(outside, target_is_directory=True)
    (root / "alias.json").symlink_to(root / "inside.json")
    for name in ("to-secret.json", "folder/secret.json"):
        with pytest.raises(ValueError, match=r"^name: .*, which leads out of it"):
            recorded.run_path(name)
        with pytest.raises(ValueError, match=r"^name: .*, which leads out of it"):
            recorded.run_json(name)
    assert recorded.run_json("alias.json") == {"inside": 1}
    assert recorded.run_json("absent.json") is None


BAD_FILES = [
    (b'{"a": 1e999}', r"expected strict JSON, got the number 1e999, beyond a float's range"),
    (b'{"a": -Infinity}', r"expected strict JSON, got the non-finite number -Infinity"),
    (b'{"a": ' + b"7" * 5000 + b"}", r"expected strict JSON, got an integer of 5000 digits"),
    (b'{"a": 1, "a": 2}', r"expected strict JSON, got the key 'a' twice in one object"),
    (b"[" * 40 + b"]" * 40, r"expected strict JSON, got nesting deeper than 32"),
    (b"[" * 100_000 + b"]" * 100_000, r"expected strict JSON, got nesting deeper than 32"),
    ('{"cpu": "caf\xe9"}'.encode("latin-1"), r"expected UTF-8 text, got byte 0xe9 at offset 12"),
    (b'{"a": ', r"expected a JSON file, got invalid JSON \("),
]


@pytest.mark.parametrize(("data", "message"), BAD_FILES)
def test_a_bad_recorded_file_is_refused_naming_it(runs, data, message):
    root, _ = runs
    (root / "run.json").write_bytes(data)
    with pytest.raises(ValueError, match=rf"^data/runs/run\.json: {message}"):
        recorded.run_json("run.json")


@pytest.mark.parametrize(("data", "message"), BAD_FILES)
def test_load_result_refuses_a_bad_file_naming_it(tmp_path, data, message):
    path = tmp_path / "run.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {message}"):
        schema.load_result(path)


def test_a_text_file_of_a_run_that_is_not_utf8_is_named(runs):
    root, _ = runs
    (root / "kernels.txt").write_bytes(b"aten::mm \xff")
    with pytest.raises(ValueError, match=r"^data/runs/kernels\.txt: expected UTF-8 text, got byte 0xff"):
        recorded.run_text("kernels.txt")
    with pytest.raises(FileNotFoundError, match=r"^data/runs/absent\.txt is missing"):
        recorded.run_text("absent.txt")


def test_a_recorded_bench_run_is_checked_when_read(runs):
    root, _ = runs
    good = json.loads((RUNS / "bench-cpu.json").read_text(encoding="utf-8"))
    del good["decode_sweep"]["points"][0]["time"]["median_s"]
    (root / "bench-cpu.json").write_text(json.dumps(good), encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"^data/runs/bench-cpu\.json: missing key 'decode_sweep\.points\[0\]\.time\.median_s'",
    ):
        recorded.cpu_bench()


def test_cpu_bench_refuses_a_list_by_name():
    with pytest.raises(
        TypeError,
        match=r"^which: expected 'current' or one of "
        r"\['epyc-2026-11-30', 'epyc-2026-12-04', 'xeon-2026-11-29'\], got list",
    ):
        recorded.cpu_bench(["current"])


# ---------------------------------------------------------------- writing: checked first, whole or nothing


def test_an_output_path_is_checked_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(
        ValueError, match=r"^--out: expected a path under directories, got .*, under the file "
    ):
        check_output_path(str(tmp_path / "file" / "r.json"), "--out")
    with pytest.raises(ValueError, match=r"^--out: expected a file to write, got the directory "):
        check_output_path(str(tmp_path / "dir"), "--out")
    with pytest.raises(ValueError, match=r"^--plots: expected a directory, got the file "):
        check_output_path(str(tmp_path / "file"), "--plots", directory=True)
    with pytest.raises(ValueError, match=r"^--plots: expected a path under directories"):
        check_output_path(str(tmp_path / "file" / "plots"), "--plots", directory=True)
    with pytest.raises(TypeError, match=r"^--out: expected a path, got int"):
        check_output_path(3, "--out")
    with pytest.raises(ValueError, match=r"^--out: expected a path, got an empty string"):
        check_output_path("", "--out")
    # where it may go: a new file in new folders, an existing file, a new or existing folder
    assert check_output_path(str(tmp_path / "a" / "b" / "r.json"), "--out").endswith("r.json")
    check_output_path(str(tmp_path / "file"), "--out")
    check_output_path(str(tmp_path / "dir"), "--plots", directory=True)
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"]  # checking wrote nothing


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="file modes: POSIX, not as root")
def test_an_output_path_in_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ValueError, match=r"^--out: expected a path this process may write"):
            check_output_path(str(locked / "new" / "r.json"), "--out")
    finally:
        locked.chmod(0o700)


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "new" / "deeper" / "r.json"

    def half_then_fail(tmp):
        Path(tmp).write_text("{half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(str(target), half_then_fail)
    assert os.listdir(tmp_path) == []  # no .tmp file, no folder made for it
    old = tmp_path / "old.json"
    old.write_text("kept")
    with pytest.raises(OSError, match="disk full"):
        write_atomically(str(old), half_then_fail)
    assert os.listdir(tmp_path) == ["old.json"] and old.read_text() == "kept"
    write_atomically(str(target), lambda tmp: Path(tmp).write_text("{}"))
    assert target.read_text() == "{}" and os.listdir(target.parent) == ["r.json"]


def test_writing_over_a_symbolic_link_replaces_the_link_not_what_it_points_to(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("untouched")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "r.json"
    link.symlink_to(elsewhere)
    write_atomically(str(link), lambda tmp: Path(tmp).write_text("new"))
    assert elsewhere.read_text() == "untouched"
    assert not link.is_symlink() and link.read_text() == "new"
