"""The house's one-way layering, checked on the source: core <- render <- ipython, and no import cycle.

Every import is read from the AST of every module, at any depth (inside functions too), and so are the string
names given to ``importlib.import_module``: a lazy import is still an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "nbdebug"

# layer -> the nbdebug modules it must never reach
FORBIDDEN = {
    "nbdebug.core": ("nbdebug.render", "nbdebug.ipython", "nbdebug.cli", "nbdebug.dist", "nbdebug.xla", "nbdebug.__main__"),
    "nbdebug.render": ("nbdebug.ipython", "nbdebug.cli", "nbdebug.__main__"),
    "nbdebug.ipython": ("nbdebug.cli", "nbdebug.__main__"),
}
# the one documented upward reference: the Result mixin asks the render registry at display time
ALLOWED_UPWARD = {("nbdebug.core._result", "nbdebug.render")}


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import and import_module("...") in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    top_level = {id(n) for n in tree.body}
    # imports under `if TYPE_CHECKING:` at module level do not run
    type_only: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only |= {id(n) for n in ast.walk(node)}
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for a in node.names:
                # `from nbdebug.render import diagnosis` imports the submodule when there is one
                sub = f"{base}.{a.name}"
                found.append((sub if sub in _MODULES else base, node.lineno, id(node) in top_level))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, node.lineno, False))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("nbdebug."):
            # a module named in a string (a lazy table, a "module:function" spec) is an import too
            name = node.value.split(":")[0].strip()
            if name.replace(".", "").replace("_", "").isalnum():
                found.append((name, node.lineno, False))
    return found


_MODULES = _modules()


def _layer(module: str) -> str | None:
    return next((layer for layer in FORBIDDEN if module == layer or module.startswith(layer + ".")), None)


def test_every_module_is_seen():
    assert "nbdebug.core._result" in _MODULES and "nbdebug.render._registry" in _MODULES
    assert len(_MODULES) > 60


@pytest.mark.parametrize("module", sorted(m for m in _MODULES if _layer(m)))
def test_no_import_against_the_layering(module):
    layer = _layer(module)
    bad = []
    for target, line, _ in _imports(module, _MODULES[module]):
        for forbidden in FORBIDDEN[layer]:
            if (target == forbidden or target.startswith(forbidden + ".")) and (module, forbidden) not in ALLOWED_UPWARD:
                bad.append(f"{module}:{line} imports {target}")
    assert not bad, "layering broken:\n" + "\n".join(bad)


def test_no_import_cycle_at_module_level():
    graph = {
        m: {t for t, _, top in _imports(m, p) if top and t in _MODULES and t != m}
        for m, p in _MODULES.items()
    }
    # a package's __init__ importing its own submodules is not a cycle unless a submodule imports the package back
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_catches_a_violation(tmp_path):
    # the walk sees imports inside functions and import_module strings: build a fake core module and read it
    fake = tmp_path / "x.py"
    fake.write_text(
        "def f():\n    from nbdebug.render import _html\n"
        "def g():\n    import importlib\n    importlib.import_module('nbdebug.ipython._cell')\n"
    )
    targets = {t for t, _, _ in _imports("nbdebug.core.x", fake)}
    assert "nbdebug.render._html" in targets and "nbdebug.ipython._cell" in targets


def test_the_display_registry_imports_nothing_heavy():
    # showing a result (a diagnosis under an error) must not pull torch, pandas or matplotlib in
    import subprocess
    import sys

    code = ("import sys, nbdebug.render\n"
            "print([m for m in ('torch', 'pandas', 'matplotlib', 'ipywidgets', 'torch_xla') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# the rooms of the house: each capability in its own package, in the layer its name says
ROOMS = {
    "nbdebug.core.explain": "the error explainer",
    "nbdebug.core.training": "gradient norms, NaN/Inf localization, the gradient history, loss statistics",
    "nbdebug.core.doctor": "the training doctor",
    "nbdebug.core.memory": "snapshots and memtrace",
    "nbdebug.core.xla": "torch_xla metrics and recompilations",
    "nbdebug.core.dist": "distributed runs and post-mortems",
    "nbdebug.core.knowledge": "the knowledge tables",
    "nbdebug.core.data": "the batch inspector",
    "nbdebug.render.memory": "the memory panels, plots and viewer",
}
# a module a person can hold in their head; the knowledge tables are data, one entry after another
MAX_LINES = 600
LONG_ALLOWED = ("nbdebug.core.knowledge.",)


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_every_room_is_a_package_in_its_layer(room):
    assert room in _MODULES and _MODULES[room].name == "__init__.py", f"{room} ({ROOMS[room]}) is not a package"
    assert _layer(room) == ".".join(room.split(".")[:2])
    # and every module below it is checked by the layering test above
    assert [m for m in _MODULES if m.startswith(room + ".")], f"{room} has no modules of its own"


def test_no_module_is_too_long_to_hold_in_your_head():
    long = {m: n for m, p in _MODULES.items()
            if not m.startswith(LONG_ALLOWED) and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along their seams): {long}"


def test_no_native_code_is_built_or_loaded():
    # nothing native is built or loaded at run time: no C/C++ source and no extension loader in the package
    native = [p for p in PACKAGE.rglob("*") if p.suffix in {".c", ".cc", ".cpp", ".cu", ".so", ".pyd"}]
    loaders = [m for m, p in _MODULES.items() if _uses_cpp_extension(p)]
    assert not native and not loaders, (native, loaders)


def _uses_cpp_extension(path) -> bool:
    """An import of torch.utils.cpp_extension or an attribute access to it in the code (a text that names the
    loader for the user, as the explainer's ninja step does, is no use of it)."""
    import ast

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any("cpp_extension" in a.name for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and ("cpp_extension" in (node.module or "")
                                                 or any(a.name == "cpp_extension" for a in node.names)):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "cpp_extension":
            return True
        called = getattr(node, "func", None)
        name = getattr(called, "id", None) or getattr(called, "attr", None)
        if isinstance(node, ast.Call) and name in {"__import__", "import_module"} and any(
                isinstance(a, ast.Constant) and "cpp_extension" in str(a.value) for a in node.args):
            return True
    return False


def test_every_result_that_holds_findings_uses_the_one_holder():
    # a result class with a `findings` field or property gets ok / kinds / finding / worst from HasFindings
    import importlib
    import inspect

    from nbdebug.core._findings import HasFindings
    from nbdebug.core._result import Result

    missing = []
    for name in sorted(m for m in _MODULES if m.startswith("nbdebug.core")):
        try:
            module = importlib.import_module(name)
        except ImportError:  # torch_xla-only modules are checked in the XLA environment
            continue
        for cls_name, cls in vars(module).items():
            if (inspect.isclass(cls) and cls.__module__ == name and issubclass(cls, Result)
                    and "findings" in {*getattr(cls, "__dataclass_fields__", {}), *vars(cls)}
                    and not issubclass(cls, HasFindings)):
                missing.append(f"{name}.{cls_name}")
    assert not missing, f"results with findings but without HasFindings: {missing}"
