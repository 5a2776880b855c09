"""The package's seams: at most 8 loose modules beside its packages, no import cycle among the tool's
modules, scenarios/ and scripts/ (type-only imports under TYPE_CHECKING and imports inside functions
included), no private name (`_x`) of one module used by another, no command function in cli/ over 80
lines (the CLI parses, calls and prints), and no test file importing from another test file (shared
stand-ins live in tests/fakes.py, fake_gpu.py and conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_CLI_FUNCTION_LINES = 80

# Private names still used across modules (each needs a public home first); the list only shrinks.
PRIVATE_USES_LEFT: dict[str, set[str]] = {}


def _modules(scenarios: bool = False) -> dict[str, Path]:
    """The tool's modules by import name; `scenarios`: with scenarios/ (gpuipc_bench.scenarios)."""
    found = {}
    for path in sorted((REPO / "gpuipc_bench").rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    for path in sorted((REPO / "scenarios").glob("*.py")) if scenarios else ():
        found[f"gpuipc_bench.scenarios.{path.stem}".removesuffix(".__init__")] = path
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(name: str, path: Path, modules) -> set[str]:
    """'module:_name' for each private name of another of the tool's modules that `name` imports
    (`from x import _y`) or reads as an attribute (`x._y`, the module bound by an import)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}  # a local name -> the module it is
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif base in modules and _private(alias.name) and base != name:
                    found.add(f"{base}:{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else (
                        alias.name.split(".")[0])

    def module_of(node) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            base = module_of(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = module_of(node.value)
            if target in modules and target != name:
                found.add(f"{target}:{node.attr}")
    return found


def _imports(name: str, path: Path, modules) -> set[str]:
    """The tool's modules `name` imports. `from pkg import sub` names the submodule, not the package
    (the package's own names count as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
            out |= subs | ({base} if len(subs) < len(node.names) else set())
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


MAX_TOP_LEVEL_MODULES = 8  # beside the packages: the vocabulary every layer may use (docs/map.md)


def test_the_package_keeps_its_modules_in_packages():
    loose = sorted(p.name for p in (REPO / "gpuipc_bench").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, loose


def test_no_import_cycle():
    modules = _modules(scenarios=True)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_no_import_cycle_among_the_scripts():
    """A script folder's modules import each other by bare name (`from lib import ...`, the folder
    being the script's first sys.path entry): no circle among them either."""
    for folder in {p.parent for p in (REPO / "scripts").rglob("*.py")}:
        modules = {p.stem: p for p in folder.glob("*.py")}
        graph = {name: _imports(name, path, modules) for name, path in modules.items()}
        assert _cycles(graph) == [], folder


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_private_names_stay_home():
    modules = _modules(scenarios=True)
    found = {name: uses for name, path in modules.items() if (uses := _private_uses(name, path, modules))}
    new = {name: sorted(uses - PRIVATE_USES_LEFT.get(name, set())) for name, uses in found.items()}
    assert {name: uses for name, uses in new.items() if uses} == {}, "give the name a public home"
    gone = {name: sorted(uses - found.get(name, set())) for name, uses in PRIVATE_USES_LEFT.items()}
    assert {name: uses for name, uses in gone.items() if uses} == {}, "remove them from PRIVATE_USES_LEFT"


def test_the_private_name_finder_finds_both_forms(tmp_path):
    (tmp_path / "a.py").write_text("from pkg.b import _hidden, shown\nimport pkg.b as bee\nfrom pkg import b\n"
                                   "bee._other()\nb._third\nbee.__name__\n")
    (tmp_path / "b.py").write_text("_hidden = shown = 1\n")
    modules = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    assert _private_uses("pkg.a", modules["pkg.a"], modules) == {"pkg.b:_hidden", "pkg.b:_other", "pkg.b:_third"}
    assert _private_uses("pkg.b", modules["pkg.b"], modules) == set()


def test_no_cli_function_over_80_lines():
    """A command parses, calls the harness and prints; the work lives below cli/. Lines from the
    `def` to the end (click's option decorators are declarations, not work)."""
    long = {}
    for path in sorted((REPO / "gpuipc_bench" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (lines := node.end_lineno - node.lineno + 1) > MAX_CLI_FUNCTION_LINES:
                    long[f"{path.name}:{node.name}"] = lines
    assert long == {}


SHARED_TEST_MODULES = {"fakes", "fake_gpu", "conftest"}


def _test_modules_imported(path: Path, test_modules: set[str]) -> set[str]:
    """The modules of `test_modules` that the file at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & test_modules


def test_test_files_import_only_the_shared_test_modules():
    folder = REPO / "tests"
    test_modules = {p.stem for p in folder.glob("*.py")}
    borrowed = {p.name: sorted(found) for p in sorted(folder.glob("*.py"))
                if (found := _test_modules_imported(p, test_modules) - SHARED_TEST_MODULES)}
    assert borrowed == {}, "move what they share to tests/fakes.py (or a fixture to conftest.py)"


def test_the_test_import_finder_finds_both_forms(tmp_path):
    (tmp_path / "test_a.py").write_text("import test_b\ndef f():\n    from test_c import x\nfrom fakes import y\n")
    found = _test_modules_imported(tmp_path / "test_a.py", {"test_a", "test_b", "test_c", "fakes"})
    assert found == {"test_b", "test_c", "fakes"}
