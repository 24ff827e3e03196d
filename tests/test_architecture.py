"""The package's layout rules, checked on its source: no module uses another module's private names,
no file grows past 600 lines, and every function the book displays is public and names its chapter.

Private means a name that starts with one underscore (dunders are Python's, not ours). A module may
use its own private names on any object (``other._length`` inside the class that defines
``_length``) and its class hierarchy's through ``self`` and ``cls``; it may not import another
module's private names, reach them as ``module._name``, or read ``obj._attr`` that it does not
define itself. Tests are exempt: they may look inside.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kvtutor"
BOOK = ROOT / "book"
MAX_LINES = 600


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _defined_private_names(tree: ast.AST) -> set[str]:
    """Every private name this module defines: functions, classes, assignments (module level, class
    level, ``self._x = ...``), parameters and imports' local aliases."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.keyword) and node.arg:  # NamedTuple/dataclass fields by keyword
            names.add(node.arg)
    for node in ast.walk(tree):  # class fields declared by annotation (dataclasses, NamedTuples)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def _imported_modules(tree: ast.AST) -> set[str]:
    """Local names bound to modules (``import torch``, ``from . import costs``, ``import x as y``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("kvtutor")):
            for a in node.names:
                target = f"{node.module}.{a.name}" if node.module else a.name
                if (PACKAGE / f"{a.name}.py").exists() or (PACKAGE / a.name).is_dir() or "." not in target:
                    names.add(a.asname or a.name)
    return names


def private_uses(path: Path) -> list[str]:
    """Each use in ``path`` of a private name that another module (or another package) defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _defined_private_names(tree)
    modules = _imported_modules(tree)
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if _private(a.name):
                    found.append(f"{rel}:{node.lineno}: from {node.module or '.'} import {a.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (a private name of another module)")
            elif node.attr not in own:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (not defined in this module)")
    return found


#: Private names of other packages that have no public twin, each used in one place, with why.
ALLOWED_PRIVATE = {
    # oneDNN's matmul (torch_weights.onednn_linear) and its packing of a weight (torch_weights.pack),
    # the two ops Inductor emits for a linear of frozen weights on CPUs
    "src/kvtutor/models/torch_weights.py": (
        "torch.ops.mkldnn._linear_pointwise",
        "torch.ops.mkldnn._reorder_linear_weight",
    ),
}


def test_no_module_uses_another_modules_private_names():
    found = [
        use
        for path in _modules()
        for use in private_uses(path)
        if not any(f": {name} (" in use for name in ALLOWED_PRIVATE.get(str(path.relative_to(ROOT)), ()))
    ]
    assert not found, "\n".join(found)


def test_the_private_name_check_catches_each_kind_of_reach(tmp_path):
    """The rule fails where it should: an import of a private name, ``module._name``, and
    ``obj._attr`` of an attribute defined elsewhere; own names and ``self._x`` pass."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import torch\nfrom .cache import _Hidden\n"
        "def f(cache):\n    cache._store()\n    return torch._C\n"
        "class A:\n    def __init__(self):\n        self._mine = 1\n"
        "    def g(self, other):\n        return self._mine + other._mine\n",
        encoding="utf-8",
    )
    tree = ast.parse(bad.read_text(encoding="utf-8"))
    assert "_mine" in _defined_private_names(tree) and "_store" not in _defined_private_names(tree)
    text = "\n".join(private_uses(bad))  # outside the package: nothing is written into src/
    assert "import _Hidden" in text and "cache._store" in text and "torch._C" in text, text
    assert "other._mine" not in text and "self._mine" not in text, text


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_longer_than_600_lines(path):
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert n_lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {n_lines} lines (at most {MAX_LINES})"


def _displayed() -> list[tuple[str, str, str, str]]:
    """(notebook, chapter title, dotted name, the chapter's kvtutor imports) for every object a
    chapter passes to ``show_source``."""
    found = []
    for nb_path in sorted(BOOK.glob("*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        title, code = "", []
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and not title:
                m = re.search(r"^# (.+)$", src, re.M)
                title = m.group(1).strip() if m else ""
            elif cell["cell_type"] == "code":
                code.append(src)
        imports = "\n".join(
            ast.unparse(node)
            for cell in code
            for node in ast.walk(ast.parse(_python_only(cell)))
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "kvtutor" in ast.unparse(node)
        )
        for call in re.finditer(r"show_source\(([^)]*)\)", "\n".join(code)):
            for arg in call.group(1).split(","):
                if arg.strip():
                    found.append((nb_path.stem, title, arg.strip(), imports))
    return found


def _python_only(cell: str) -> str:
    """A code cell without IPython's magics and shell escapes, so that ``ast`` can parse it."""
    lines = cell.splitlines()
    return "\n".join(
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in lines
    )


def _resolve(dotted: str, imports: str) -> object:
    """A name as a chapter writes it, evaluated after the chapter's own kvtutor imports."""
    namespace: dict[str, object] = {}
    exec(imports, namespace)  # noqa: S102 - the book's own import lines
    return eval(dotted, namespace)  # noqa: S307 - a dotted name from the book


DISPLAYED = _displayed()


def test_the_book_displays_something():
    assert len(DISPLAYED) > 30 and {nb for nb, *_ in DISPLAYED} >= {"prefill", "decode", "paged"}


@pytest.mark.parametrize(
    ("notebook", "title", "dotted", "imports"), DISPLAYED, ids=[f"{n}:{d}" for n, _, d, _ in DISPLAYED]
)
def test_every_displayed_function_is_public_and_names_its_chapter(notebook, title, dotted, imports):
    assert not any(_private(p) for p in dotted.split(".")), (
        f"{notebook}: the book displays the private {dotted}; renaming it would break the chapter"
    )
    obj = _resolve(dotted, imports)
    doc = " ".join((getattr(obj, "__doc__", "") or "").split())
    assert f'"{title}"' in doc, f'{dotted}\'s docstring should say the chapter "{title}" shows it'


def _documented_chapters() -> dict[str, set[str]]:
    """qualified name -> the chapters its docstring says show it, for every function, method,
    property and class of the package whose docstring says so."""
    import importlib
    import inspect

    found: dict[str, set[str]] = {}
    for path in _modules():
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        members = [obj for _, obj in inspect.getmembers(module) if getattr(obj, "__module__", None) == name]
        members += [
            (attr.fget if isinstance(attr, property) else attr)
            for cls in list(members)
            if inspect.isclass(cls)
            for attr in vars(cls).values()
        ]
        for obj in members:
            doc = " ".join((getattr(obj, "__doc__", None) or "").split())
            if "The book shows this in" in doc:
                said = doc.split("The book shows this in", 1)[1]
                found[f"{obj.__module__}.{obj.__qualname__}"] = set(re.findall(r'"([^"]+)"', said))
    return found


def test_no_docstring_names_a_chapter_that_does_not_show_it():
    shown: dict[str, set[str]] = {}
    for _, title, dotted, imports in DISPLAYED:
        obj = _resolve(dotted, imports)
        obj = obj.fget if isinstance(obj, property) else obj
        shown.setdefault(f"{obj.__module__}.{obj.__qualname__}", set()).add(title)
    said = _documented_chapters()
    assert said, "no docstring says which chapter shows it"
    wrong = {
        name: (chapters, shown.get(name, set()))
        for name, chapters in said.items()
        if chapters != shown.get(name)
    }
    assert not wrong, "docstring chapters (said, shown):\n" + "\n".join(f"{k}: {v}" for k, v in wrong.items())


@pytest.mark.parametrize(
    ("notebook", "title", "dotted", "imports"), DISPLAYED, ids=[f"{n}:{d}" for n, _, d, _ in DISPLAYED]
)
def test_every_displayed_function_fits_the_code_column(notebook, title, dotted, imports):
    """The book's code box holds 80 columns: a longer line of displayed source scrolls sideways.
    What is displayed is ``show_source``'s text (no pragmas, no docstring chapter note)."""
    from kvtutor.book.display import show_source

    shown = show_source(_resolve(dotted, imports)).data.removeprefix("```python\n").removesuffix("\n```")
    long = [line for line in shown.splitlines() if len(line) > 80]
    assert not long, f"{notebook}: {dotted} shows lines over 80 columns:\n" + "\n".join(long)


#: The walkthrough: the pages a learner reads as the mechanism, step by step.
WALKTHROUGH = ("prefill", "decode", "side_by_side", "layers")
#: What a walkthrough function must not show: argument checks, the backend layer, the book's hooks.
MACHINERY = re.compile(r"\braise\b|\bcheck_\w+\(|isinstance\(|self\.ops\b|\btrace\b|\bcore\b")
WALKED = [d for d in DISPLAYED if d[0] in WALKTHROUGH]


@pytest.mark.parametrize(
    ("notebook", "title", "dotted", "imports"), WALKED, ids=[f"{n}:{d}" for n, _, d, _ in WALKED]
)
def test_the_walkthrough_shows_the_mechanism_alone(notebook, title, dotted, imports):
    """A function the walkthrough displays reads as the mechanism in at most 30 lines: its
    checks and the book's hooks live in the public entry point around it, not in what is shown."""
    from kvtutor.book.display import show_source

    shown = show_source(_resolve(dotted, imports)).data.removeprefix("```python\n").removesuffix("\n```")
    machinery = [line for line in shown.splitlines() if MACHINERY.search(line)]
    assert not machinery, f"{notebook}: {dotted} shows machinery:\n" + "\n".join(machinery)
    assert len(shown.splitlines()) <= 30, f"{notebook}: {dotted} shows {len(shown.splitlines())} lines"


def test_the_walkthrough_check_bites():
    assert WALKED and {d[0] for d in WALKED} >= {"prefill", "decode"}
    assert MACHINERY.search("        layer, k, v = self.check_update(layer, k, v, plan)")
    assert MACHINERY.search("    record(trace, q_HTK=q_HTK)") and MACHINERY.search(
        "core: AttentionCore = None"
    )
    assert not MACHINERY.search("    o_HTK = attention_core(q_HTK, k_HSK, v_HSK, mask_TS)")


# ------------------------------------------------------------------ the layers of the package

#: The package's parts, lowest first. A module imports only from its own layer or a lower one
#: (lazy imports and ``TYPE_CHECKING`` imports included), and the modules form no circle.
LAYERS = (
    ("base", ("validate", "text", "extras", "environment")),
    ("caches", ("caches",)),
    ("models", ("models",)),
    ("measure", ("measure",)),
    ("serving", ("serving",)),
    ("book", ("book",)),
    ("plots", ("plots",)),
    ("bench", ("bench",)),
    ("entry points", ("__init__", "__main__")),
)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """src/kvtutor/caches/kv.py -> "caches.kv"; a package's __init__.py -> its name."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """The index in LAYERS of the layer that holds ``module`` ("caches.kv" -> 1)."""
    for index, (_, heads) in enumerate(LAYERS):
        if module.split(".")[0] in heads:
            return index
    raise AssertionError(f"{module}: in no layer of LAYERS; add its part there")


def kvtutor_imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """The kvtutor modules ``path`` imports, anywhere in the file, as dotted names below kvtutor."""
    own = module_name(path, package).split(".")
    here = own if path.name == "__init__.py" else own[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name[len("kvtutor.") :] for a in node.names if a.name.startswith("kvtutor."))
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base, tail = here[: len(here) - node.level + 1], node.module or ""
        elif node.module == "kvtutor" or (node.module or "").startswith("kvtutor."):
            base, tail = [], (node.module or "").removeprefix("kvtutor").lstrip(".")
        else:
            continue
        module = ".".join(base + (tail.split(".") if tail else []))
        for alias in node.names:  # `from . import costs` imports a module
            sub = f"{module}.{alias.name}" if module else alias.name
            is_module = (package / sub.replace(".", "/")).with_suffix(".py").exists()
            # a name from the package itself (`from kvtutor import TOY_CONFIG`) is its __init__'s
            found.add(
                sub if is_module or (package / sub.replace(".", "/")).is_dir() else module or "__init__"
            )
    return {m for m in found if m}


def layer_violations(package: Path = PACKAGE) -> list[str]:
    """Each import of a higher layer, as "models.llama -> serving.loop (models imports serving)"."""
    found = []
    for path in sorted(package.rglob("*.py")):
        here = module_name(path, package)
        for target in sorted(kvtutor_imports(path, package)):
            if layer_of(target) > layer_of(here):
                low, high = LAYERS[layer_of(here)][0], LAYERS[layer_of(target)][0]
                found.append(f"{here} -> {target} ({low} imports {high})")
    return found


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """The circles in the module import graph (each a list of modules, first repeated last)."""
    graph = {module_name(p, package): kvtutor_imports(p, package) for p in sorted(package.rglob("*.py"))}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt == node:
                continue
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
    return cycles


def test_every_part_imports_only_from_the_parts_below_it():
    assert not layer_violations(), "\n".join(layer_violations())


def test_no_modules_import_each_other_in_a_circle():
    # A package's __init__ that re-exports its modules is not a circle with them.
    cycles = [c for c in import_cycles() if not any(m.count(".") == 0 and m != c[0] for m in c[1:-1])]
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_layer_checks_catch_a_higher_import_and_a_circle(tmp_path):
    """The checks fail where they should, on a package written outside src/."""
    pkg = tmp_path / "kvtutor"
    for part in ("caches", "models"):
        (pkg / part).mkdir(parents=True)
        (pkg / part / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "validate.py").write_text("", encoding="utf-8")
    (pkg / "caches" / "kv.py").write_text("def f():\n    from ..models.gpt import G\n", encoding="utf-8")
    (pkg / "models" / "gpt.py").write_text("from ..caches import kv\nfrom . import head\n", encoding="utf-8")
    (pkg / "models" / "head.py").write_text(
        "from .gpt import G\nfrom kvtutor.validate import x\n", encoding="utf-8"
    )
    assert kvtutor_imports(pkg / "models" / "gpt.py", pkg) == {"caches.kv", "models.head"}
    (pkg / "caches" / "ring.py").write_text("from kvtutor import TOP\n", encoding="utf-8")
    assert kvtutor_imports(pkg / "models" / "head.py", pkg) == {"models.gpt", "validate"}
    assert layer_violations(pkg) == [
        "caches.kv -> models.gpt (caches imports models)",
        "caches.ring -> __init__ (caches imports entry points)",
    ]
    cycles = {tuple(c) for c in import_cycles(pkg)}
    assert ("models.gpt", "models.head", "models.gpt") in cycles or (
        "models.head",
        "models.gpt",
        "models.head",
    ) in cycles
    assert any("caches.kv" in c and "models.gpt" in c for c in cycles), cycles


def _method_bodies(path: Path) -> list[tuple[str, str, str]]:
    """(class, method, body dump) of every method of at least three statements in ``path``, the
    docstring left out, so that two copies of one method compare equal whatever they are called."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = item.body[1:] if ast.get_docstring(item) is not None else item.body
                if len(body) >= 3:
                    found.append((node.name, item.name, ast.dump(ast.Module(body=body, type_ignores=[]))))
    return found


def copied_methods(paths: list[Path]) -> list[str]:
    """Methods whose bodies appear in two classes, and methods borrowed by assignment in a class
    body (``forward = OtherClass.forward``)."""
    seen: dict[str, str] = {}
    found = []
    for path in paths:
        for cls, name, body in _method_bodies(path):
            where = f"{path.name}:{cls}.{name}"
            if body in seen and seen[body].split(":")[1].split(".")[0] != cls:
                found.append(f"{where} copies {seen[body]}")
            seen.setdefault(body, where)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    value = item.value if isinstance(item, ast.Assign) else None
                    owner = value.value if isinstance(value, ast.Attribute) else None
                    if isinstance(owner, ast.Name) and owner.id[:1].isupper():
                        found.append(f"{path.name}:{node.name} borrows {ast.unparse(value)}")
    return found


def test_no_method_is_copied_between_classes():
    """Shared behaviour lives in a base class (NumpyDecoder, TorchDecoder), never in copies."""
    found = copied_methods(_modules())
    assert not found, "\n".join(found)


def test_the_copy_check_catches_a_copy_and_a_borrowed_method(tmp_path):
    body = "        a = 1\n        b = a + 1\n        return a * b\n"
    mod = tmp_path / "m.py"
    mod.write_text(
        f"class A:\n    def f(self):\n{body}\nclass B:\n    def g(self):\n        '''Doc.'''\n{body}\n"
        "class C:\n    f = A.f\n",
        encoding="utf-8",
    )
    found = copied_methods([mod])
    assert found == ["m.py:B.g copies m.py:A.f", "m.py:C borrows A.f"], found
