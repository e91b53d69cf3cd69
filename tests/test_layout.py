"""The package's shape: modules grouped by layer, imports flowing one way, no cycles."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_gpuutil"

#: The layers are import-linter's contracts in pyproject.toml (``lint-imports``, run by .ci/run, names
#: the import that breaks one); the tests here check what it does not: that the contracts name every
#: folder and top-level module, that there are no cycles, and the room each folder has.


def contracts() -> list[dict]:
    from tests.helpers.versions import read_pyproject  # tomllib, or tomli before Python 3.11

    return read_pyproject(PACKAGE.parent / "pyproject.toml")["tool"]["importlinter"]["contracts"]


def layer_names() -> list[set[str]]:
    """The layers contract's layers, top first, each as the names of its folders and modules."""
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    return [{name.strip() for name in layer.replace("|", ":").split(":")} for layer in layers["layers"]]


def modules() -> dict[str, Path]:
    """Dotted name (without the package) -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            parts = parts[:-1]  # a folder's __init__ goes by the folder's name
        found[".".join(parts)] = path
    return found


def imported_modules(name: str, path: Path) -> set[str]:
    """Package modules that ``name`` imports anywhere (module level, in functions, under TYPE_CHECKING)."""
    known = modules()
    package_parts = name.split(".") if path.name == "__init__.py" and name != "__init__" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "pytest_gpuutil" or node.module.startswith("pytest_gpuutil.")):
                module = node.module[len("pytest_gpuutil."):] if node.module != "pytest_gpuutil" else ""
            else:
                continue
            targets = [f"{module}.{a.name}".strip(".") for a in node.names] + [module]
        elif isinstance(node, ast.Import):
            targets = [a.name[len("pytest_gpuutil."):] for a in node.names if a.name.startswith("pytest_gpuutil.")]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


#: The package's folders, each a layer or part of one (see pyproject.toml's contracts); a new folder is a decision, made here.
FOLDERS = {"traces", "capture", "children", "analysis", "rundoc", "gates", "history", "report", "cli", "session",
           "hardware", "measurement", "machine"}
#: Packages inside a folder: the HTML report, the findings' places (analysis and capture; issue 42), time intervals (analysis: the waits' idle, the unions in C) (their modules obey the same limits)
NESTED = {"report": {"html_report"}, "analysis": {"places", "intervals"}, "capture": {"places"}}
#: No package module is longer than this (the C reader, traces/_scan.c, is not a Python module)
MAX_MODULE_LINES = 500
#: No class is longer than this: a class that grows past it does more than one job
MAX_CLASS_LINES = 300
#: Files per folder, as tests/test_repo_layout.py counts them for every folder outside tests/
MAX_FILES = 12


def test_folders_and_nested_packages_are_the_known_ones():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == FOLDERS
    for folder in sorted(folders):
        nested = {p.parent.name for p in (PACKAGE / folder).glob("*/__init__.py")}
        assert nested == NESTED.get(folder, set()), f"{folder} has nested packages {sorted(nested)}"
        for name in nested:
            assert not list((PACKAGE / folder / name).glob("*/__init__.py")), f"{folder}/{name} has nested packages"


def test_at_most_12_modules_a_folder():
    folders = [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]
    crowded = {str(f.relative_to(PACKAGE.parent)): len(list(f.glob("*.py"))) for f in folders}
    assert {f: n for f, n in crowded.items() if n > MAX_FILES} == {}


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_class_over_300_lines():
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long[f"{path.relative_to(PACKAGE.parent)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert long == {}


def test_html_page_assets_are_package_files_not_python_strings():
    assets = PACKAGE / "report" / "html_report" / "assets"
    assert sorted(p.name for p in assets.iterdir() if p.suffix in (".css", ".js")) == ["report.css", "report.js", "timeline.css", "timeline.js"]
    for path in (PACKAGE / "report" / "html_report").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "function(" not in text.replace(" ", "") and "{display:" not in text.replace(" ", ""), path.name
    from tests.helpers.versions import read_pyproject  # tomllib, or tomli before Python 3.11

    package_data = read_pyproject(PACKAGE.parent / "pyproject.toml")["tool"]["setuptools"]["package-data"]
    assert set(package_data["pytest_gpuutil.report.html_report"]) >= {"assets/*.css", "assets/*.js"}


def test_the_layers_contract_names_every_folder_and_top_level_module_once():
    named = [name for layer in layer_names() for name in layer]
    tops = {name.split(".")[0] for name in modules()} - {"__init__"}
    assert sorted(named) == sorted(set(named)), "a name in two layers"
    assert set(named) == tops


def test_the_sources_are_independent_in_a_contract_of_their_own():
    independent = [set(c["modules"]) for c in contracts() if c["type"] == "independence"]
    assert {"pytest_gpuutil.capture", "pytest_gpuutil.hardware"} in independent


def test_no_import_cycle():
    graph = {name: imported_modules(name, path) - {""} for name, path in modules().items()}
    graph = {name: {t for t in targets if t in graph and t != "__init__"} for name, targets in graph.items()}
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, stack + [node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])


def test_module_names_do_not_shadow_the_standard_library():
    import sys

    stdlib = getattr(sys, "stdlib_module_names", frozenset())  # Python 3.10+
    clashes = [n for n in modules() if any(part in stdlib for part in n.split(".") if not part.startswith("__"))]
    assert clashes == []


#: What the run document may import: the bottom layer only (traces : rundoc : records : machine)
RUNDOC_MAY_IMPORT = ("rundoc", "records", "traces", "machine")
#: Where modules that read runs live besides the package
ROOT = PACKAGE.parent
SCRIPT_AND_TEST_FOLDERS = ("tests", "benchmarks", "validation", "scripts", "examples")


def test_the_run_document_imports_only_the_bottom_layer():
    found = {name: imported_modules(name, path) for name, path in modules().items() if name.split(".")[0] == "rundoc"}
    assert "rundoc.reading" in found and "records" in found["rundoc.reading"]  # the scan sees rundoc's imports
    wrong = {name: sorted(t for t in targets if t.split(".")[0] not in RUNDOC_MAY_IMPORT)
             for name, targets in found.items()}
    assert {name: targets for name, targets in wrong.items() if targets} == {}


def rundoc_names() -> set[str]:
    """Every name defined at the top of a module of ``rundoc/`` (functions, classes, constants)."""
    names: set[str] = set()
    for path in (PACKAGE / "rundoc").glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def gates_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each name ``path`` imports from ``pytest_gpuutil.gates`` or one of its modules."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "pytest_gpuutil.gates" or node.module.startswith("pytest_gpuutil.gates.")):
            found += [(node.module, alias.name) for alias in node.names]
    return found


def test_runs_are_read_and_numbers_formatted_through_rundoc_not_gates():
    names = rundoc_names()
    assert {"RunDoc", "RunDocError", "load_run_doc", "machine_id", "METRICS", "metric_values", "finite_number",
            "format_value", "compact_number", "run_document", "safe_name", "RUN_FORMAT"} <= names
    files = [p for p in PACKAGE.rglob("*.py") if "gates" not in p.relative_to(PACKAGE).parts[:1]]
    files += [p for folder in SCRIPT_AND_TEST_FOLDERS for p in (ROOT / folder).rglob("*.py")]
    assert any(gates_imports(p) for p in files)  # the scan sees imports of the gates (expressions, comparisons)
    through_gates = sorted(f"{p.relative_to(ROOT)}: {module}.{name}" for p in files
                           for module, name in gates_imports(p) if name in names)
    assert through_gates == []
    # gates/ defines none of the run document's names again (no second copy, no shim)
    for path in (PACKAGE / "gates").glob("*.py"):
        defined = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert defined & names == set(), path.name

