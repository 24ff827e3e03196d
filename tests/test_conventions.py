"""The files a reader of a Python project expects exist and agree with each other and with
pyproject.toml: LICENSE, CITATION.cff, CHANGELOG.md, CONTRIBUTING.md, py.typed, the pre-commit
configuration, the CI workflow; and the built wheel ships LICENSE and py.typed."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import kvtutor

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def _read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _pins() -> dict[str, str]:
    pins = {}
    for line in _read("constraints.txt").splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            pins[req.name.lower().replace("_", "-")] = str(req.specifier).removeprefix("==")
    return pins


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*\??:?=\s*(\S*)\s*$", MAKEFILE, re.M)
    assert match, f"no {name} in the Makefile"
    return match.group(1)


@pytest.mark.parametrize(
    "name",
    [
        "LICENSE",
        "CITATION.cff",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "src/kvtutor/py.typed",
        ".pre-commit-config.yaml",
        ".github/workflows/ci.yml",
    ],
)
def test_file_exists(name):
    assert (ROOT / name).is_file(), name


def test_license_is_the_mit_license_that_pyproject_names():
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = _read("LICENSE")
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    assert re.search(r"^Copyright \(c\) \d{4} The kvtutor authors$", text, re.M)


def test_citation_matches_pyproject():
    cff = yaml.safe_load(_read("CITATION.cff"))
    assert cff["cff-version"] == "1.2.0"
    assert str(cff["version"]) == PROJECT["version"] == kvtutor.__version__
    assert cff["license"] == PROJECT["license"]
    assert [a["name"] for a in cff["authors"]] == [a["name"] for a in PROJECT["authors"]]
    assert cff["repository-code"] == PROJECT["urls"]["Homepage"]


def test_changelog_has_this_version():
    text = _read("CHANGELOG.md")
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(PROJECT['version'])}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)


def test_contributing_covers_the_everyday_tasks():
    text = _read("CONTRIBUTING.md")
    for needle in ["make notebooks", "quiet machine", "make bench", "tools/gpu_check.sh", "_toc.yml",
                   "80 columns", "NBVAL_IGNORE_OUTPUT", "make test"]:  # fmt: skip
        assert needle in text, needle


def test_pre_commit_runs_the_pinned_ruff():
    config = yaml.safe_load(_read(".pre-commit-config.yaml"))
    (repo,) = [r for r in config["repos"] if r["repo"].endswith("/ruff-pre-commit")]
    assert repo["rev"] == "v" + _pins()["ruff"]
    hooks = {h["id"]: h for h in repo["hooks"]}
    assert set(hooks) == {"ruff-check", "ruff-format"}
    # the same settings as `make lint`: pyproject.toml and book/ruff.toml, found by ruff itself
    assert not any("--config" in " ".join(h.get("args", [])) for h in hooks.values())
    assert "$(BIN)/ruff check ." in MAKEFILE and "$(BIN)/ruff format --check ." in MAKEFILE


def test_ci_workflow_runs_the_gate_on_linux_and_unit_tests_on_macos_and_windows():
    workflow = yaml.safe_load(_read(".github/workflows/ci.yml"))
    jobs = workflow["jobs"]
    runs = {name: " ".join(s.get("run", "") for s in job["steps"]) for name, job in jobs.items()}
    linux = [n for n, job in jobs.items() if job["runs-on"] == "ubuntu-latest"]
    assert linux and all("make test" in runs[n] for n in linux)
    others = [n for n in jobs if n not in linux]
    assert set(jobs[others[0]]["strategy"]["matrix"]["os"]) == {"macos-latest", "windows-latest"}
    assert "pytest tests --ignore=tests/browser" in runs[others[0]]
    assert _make_variable("TORCH_INDEX") in runs[others[0]]  # the same CPU torch as make install
    assert "make test" in _read(".ci/run")


def test_python_floor_is_one_number_that_every_pin_admits():
    floor = _make_variable("PY_MIN")
    assert PROJECT["requires-python"] == f">={floor}"
    assert f"Python >= {floor}" in _read("README.md")
    workflow = _read(".github/workflows/ci.yml")
    assert f'"{floor}"' in workflow or f"Python {floor}" in workflow
    refused = []
    for name, version in _pins().items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version.split("+")[0] != version:
            continue
        requires = dist.metadata.get("Requires-Python")
        if requires and not SpecifierSet(requires).contains(f"{floor}.0"):
            refused.append(f"{name}=={version} requires Python {requires}")
    assert not refused, refused


def test_torch_stays_pinned_and_the_cpu_index_is_documented():
    assert _pins()["torch"] == _make_variable("TORCH")
    assert _make_variable("TORCH_INDEX") == "https://download.pytorch.org/whl/cpu"
    assert "TORCH_INDEX" in _read("README.md")


@pytest.mark.skipif(sys.platform == "win32" or shutil.which("make") is None, reason="needs make and a shell")
def test_make_help_shows_values_not_variables():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "$(" not in out
    assert "http://127.0.0.1:8000/" in out
    assert "make distclean" in out and "make chromium" in out


def test_wheel_ships_license_and_py_typed(tmp_path):
    """Build the wheel (offline: no build isolation, no dependencies) from a copy of the sources."""
    src = tmp_path / "project"
    shutil.copytree(
        ROOT / "src" / "kvtutor", src / "src" / "kvtutor", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ["pyproject.toml", "README.md", "LICENSE"]:
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "dist"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        ".",
    ]
    subprocess.run([*cmd, "."], cwd=src, check=True, capture_output=True, timeout=120)
    (wheel,) = out.glob("kvtutor-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        license_name = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert zf.read(license_name).decode() == _read("LICENSE")
    assert "kvtutor/py.typed" in names
    assert "License-Expression: MIT" in metadata
    assert f"Requires-Python: {PROJECT['requires-python']}" in metadata
