"""The apps depend in one direction only: rag_project <- tenancy <- knowledge <- retrieval.

Each app imports itself and the apps to its left, never one to its right: ``rag_project`` (the
project: settings, URLconf, Celery, embedded services) imports no app and names them by dotted
strings; ``tenancy`` builds on ``rag_project`` only; ``knowledge`` never imports ``retrieval``
(``retrieval`` reacts to knowledge's signals instead). ``bench`` may import anything and nothing
but the tests imports it. Every import counts, including ones inside functions (a lazy import is
still a dependency) and ``importlib.import_module``/``__import__`` of a literal name.

Inside ``retrieval`` its parts (sub-packages and top-level modules) are layered the same way,
by the table ``RETRIEVAL_PARTS``. And no function imports the project's own modules, except the
few of ``LOCAL_IMPORTS_ALLOWED``, each with its reason: an import inside a function hides a
dependency from the reader and, most often, a cycle that the layering would otherwise show.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

LAYERS = ["rag_project", "tenancy", "knowledge", "retrieval"]
APPS = [*LAYERS, "bench"]
ALLOWED: dict[str, set[str]] = {app: set(LAYERS[: i + 1]) for i, app in enumerate(LAYERS)}
ALLOWED["bench"] = set(APPS)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(
    source: str | ast.AST, module: str, is_package: bool, with_names: bool = False
) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, at any depth: top level,
    functions, classes, ``if TYPE_CHECKING`` blocks, and import_module/__import__ of a literal.
    ``with_names``: ``from a import b`` gives ``a.b`` (b may be a module of package a)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    tree = ast.parse(source) if isinstance(source, str) else source
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if with_names:
                found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, name))
        elif _dynamic_import(node):
            literal = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if isinstance(literal, str):
                found.append((node.lineno, literal))
    return sorted(found)


def _dynamic_import(node: ast.AST) -> bool:
    """A call of import_module or __import__ (with a literal name or not)."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return called in ("import_module", "__import__")


def source_files(app: str, root: Path = REPO) -> list[Path]:
    return sorted(path for path in (root / app).rglob("*.py") if "migrations" not in path.parts)


def violations(app: str, root: Path = REPO) -> list[str]:
    """``file:line: imports name (app may import only ...)`` for every import out of bounds."""
    allowed = ", ".join(a for a in APPS if a in ALLOWED[app])
    wrong = []
    for path in source_files(app, root):
        module = module_name(path, root)
        for line, name in imported_modules(path.read_text(), module, path.stem == "__init__"):
            target = name.split(".")[0]
            if target in APPS and target not in ALLOWED[app]:
                wrong.append(
                    f"{path.relative_to(root)}:{line}: imports {name} "
                    f"({app} may import only {allowed})"
                )
    return wrong


@pytest.mark.parametrize("app", APPS)
def test_each_app_imports_only_itself_and_the_apps_below_it(app):
    wrong = violations(app)
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_nothing_but_the_tests_imports_bench():
    wrong = []
    for path in sorted(REPO.glob("*.py")) + [p for app in LAYERS for p in source_files(app)]:
        for line, name in imported_modules(path.read_text(), module_name(path), False):
            if name.split(".")[0] == "bench":
                wrong.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    assert not wrong, "only the tests may import bench:\n" + "\n".join(wrong)


def test_every_app_has_sources_to_check():
    # A renamed or moved app would otherwise pass the checks above by having nothing to read.
    for app in APPS:
        assert source_files(app), f"no Python files under {app}/"


def test_the_check_sees_lazy_relative_and_dynamic_imports():
    """The checker itself: an import hidden in a function, a relative one that climbs to the
    package, and import_module of a literal all count."""
    source = (
        "import os\n"
        "from . import sibling\n"
        "from ..ingestion import parsing\n"
        "def later():\n"
        "    from retrieval.search import search\n"
        "    import importlib\n"
        "    return importlib.import_module('retrieval.tasks')\n"
        "class Lazy:\n"
        "    def method(self):\n"
        "        return __import__('bench.cli')\n"
    )
    found = imported_modules(source, "knowledge.services.documents", is_package=False)
    assert found == [
        (1, "os"),
        (2, "knowledge.services"),
        (3, "knowledge.ingestion"),
        (5, "retrieval.search"),
        (6, "importlib"),
        (7, "retrieval.tasks"),
        (10, "bench.cli"),
    ]


def test_a_violation_names_the_file_line_and_import(tmp_path):
    (tmp_path / "knowledge" / "services").mkdir(parents=True)
    (tmp_path / "knowledge" / "migrations").mkdir()
    (tmp_path / "knowledge" / "services" / "late.py").write_text(
        "from tenancy.errors import NotYours\n\ndef f():\n    from retrieval import tasks\n"
    )
    # Migrations may name any app (they are generated, and Django orders them itself).
    (tmp_path / "knowledge" / "migrations" / "0001.py").write_text("import retrieval\n")
    assert violations("knowledge", tmp_path) == [
        "knowledge/services/late.py:4: imports retrieval "
        "(knowledge may import only rag_project, tenancy, knowledge)"
    ]


# --------------------------------------------------------------------------- inside retrieval

# retrieval's parts (a sub-package or a top-level module) and the other parts each may import,
# lowest first. Nothing here has a cycle (checked below), so it is a layering: ``core``
# (a knowledge base's identity, version snapshot and document stamps, the byte-bounded cache,
# the search filters and their SQL) under the index (``bm25``, ``bm25store``) and the vector
# leg, ``search`` over all of them, and what reacts to changes, serves and warms on top.
RETRIEVAL_PARTS: dict[str, set[str]] = {
    # Leaves: they import no other part.
    "models": set(),
    "replica": set(),
    "compiled": set(),
    "fusion": set(),
    "relevance": set(),
    "rerank": set(),
    "core": {"replica"},
    "bm25": {"core", "compiled"},
    "bm25store": {"core", "bm25", "models", "replica"},
    "vector": {"core", "compiled", "replica"},
    "search": {"core", "bm25", "bm25store", "vector", "fusion", "relevance", "replica", "rerank"},
    "calibration": {"search", "relevance"},
    "changes": {"core", "bm25store", "vector", "calibration", "models"},
    "tasks": {"changes", "vector"},
    "signals": {"core", "bm25store", "changes"},
    "warmup": {"bm25", "bm25store", "vector"},
    "precompile": {"bm25", "vector"},
    "api": {"search"},
    "langchain": {"search", "vector"},
    "mcp": {"api", "langchain", "search"},
    "admin": {"core", "bm25store", "calibration", "models", "search", "tasks"},
    "management": {"calibration", "mcp", "search"},
    "apps": {"signals", "warmup", "langchain"},
}


def part_of(module: str) -> str | None:
    """The part of retrieval a dotted name is in (None: not in retrieval, or the package)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "retrieval" and len(parts) > 1 else None


def part_violations(root: Path = REPO) -> list[str]:
    """``file:line: imports name (part may import only ...)`` for every import between two of
    retrieval's parts that ``RETRIEVAL_PARTS`` does not allow, and a part it does not list."""
    wrong = []
    for path in source_files("retrieval", root):
        module = module_name(path, root)
        source = part_of(module)
        if source is None:
            continue
        if source not in RETRIEVAL_PARTS:
            wrong.append(f"{path.relative_to(root)}: part {source} is not in RETRIEVAL_PARTS")
            continue
        allowed = RETRIEVAL_PARTS[source]
        text = path.read_text()
        for line, name in imported_modules(text, module, path.stem == "__init__", True):
            target = part_of(name)
            if target is not None and target != source and target not in allowed:
                wrong.append(
                    f"{path.relative_to(root)}:{line}: imports {name} "
                    f"({source} may import only {', '.join(sorted(allowed)) or 'no other part'})"
                )
    return wrong


def test_retrievals_parts_import_only_the_parts_below_them():
    wrong = part_violations()
    assert not wrong, "imports against retrieval's layering:\n" + "\n".join(wrong)


def test_the_table_of_retrievals_parts_is_a_layering():
    """No cycle, and every part it names exists."""
    placed: list[str] = []
    left = dict(RETRIEVAL_PARTS)
    while left:
        ready = [part for part, below in left.items() if below <= set(placed)]
        assert ready, f"a cycle among {sorted(left)}"
        placed += ready
        for part in ready:
            del left[part]
    parts = {part_of(module_name(p)) for p in source_files("retrieval")} - {None}
    assert set(RETRIEVAL_PARTS) == parts


def test_a_part_imported_by_name_or_relatively_counts(tmp_path):
    (tmp_path / "retrieval" / "vector").mkdir(parents=True)
    (tmp_path / "retrieval" / "search").mkdir()
    (tmp_path / "retrieval" / "vector" / "late.py").write_text(
        "from retrieval import core\n"
        "def f():\n"
        "    from retrieval import search\n"
        "    from ..bm25store import store\n"
        "    from . import hnsw\n"
    )
    (tmp_path / "retrieval" / "search" / "legs.py").write_text("from retrieval.vector import x\n")
    assert part_violations(tmp_path) == [
        "retrieval/vector/late.py:3: imports retrieval.search "
        "(vector may import only compiled, core, replica)",
        "retrieval/vector/late.py:4: imports retrieval.bm25store.store "
        "(vector may import only compiled, core, replica)",
    ]


# --------------------------------------------------------------------------- inside functions

# The function-local imports of the project's own modules that stay: (file, function) -> why.
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("retrieval/apps.py", "RetrievalConfig.ready"): (
        "Django's ready(): the receivers, the warm-up and the LangChain adapter import models, "
        "which exist only once the app registry is ready"
    ),
    ("retrieval/search/__init__.py", "__getattr__"): (
        "names loaded on first use, so that the search vocabulary (types, which the remote "
        "LangChain classes read without Django) does not load the service and Django's models"
    ),
    ("retrieval/langchain/__init__.py", "__getattr__"): (
        "names loaded on first use: langchain-core and the service only when one is used"
    ),
    ("retrieval/compiled.py", "Loops._load"): (
        "the numba loops (retrieval.bm25._compiled, retrieval.vector._compiled): a heavy "
        "dependency, loaded by the warm-up or the first caller, never on import"
    ),
    ("retrieval/bm25store/availability.py", "_importable"): (
        "imports BM25's third-party dependencies by name to find out whether they are installed"
    ),
}


def local_imports(app: str, root: Path = REPO) -> list[str]:
    """``file:line (function): imports name`` for every import of a project module inside a
    function of ``app``, and every import_module/__import__ of a name not written out there."""
    found: set[tuple[str, int, str, str]] = set()
    for path in source_files(app, root):
        module = module_name(path, root)
        relative = path.relative_to(root).as_posix()
        for function, node in _functions(ast.parse(path.read_text())):
            if (relative, function) in LOCAL_IMPORTS_ALLOWED:
                continue
            for line, name in imported_modules(node, module, path.stem == "__init__"):
                if name.split(".")[0] in LAYERS:
                    found.add((relative, line, function, f"imports {name}"))
            for call in ast.walk(node):
                if _dynamic_import(call) and not isinstance(call.args[0], ast.Constant):
                    found.add((relative, call.lineno, function, "imports a name made there"))
    return [f"{path}:{line} ({function}): {what}" for path, line, function, what in sorted(found)]


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every outermost function (a method as Class.method); what a
    function nests is its own."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((prefix + node.name, node))
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, f"{prefix}{node.name}.")
        else:
            found += _functions(node, prefix)
    return found


@pytest.mark.parametrize("app", LAYERS)
def test_no_function_imports_the_projects_own_modules(app):
    found = local_imports(app)
    assert not found, "imports inside functions (import at module level):\n" + "\n".join(found)


def test_every_allowed_local_import_is_still_there():
    # An entry whose import went away would otherwise excuse the next one written there.
    for path, function in LOCAL_IMPORTS_ALLOWED:
        tree = ast.parse((REPO / path).read_text())
        nodes = [node for name, node in _functions(tree) if name == function]
        assert nodes, f"{path} has no function {function}"
        assert any(
            isinstance(n, ast.Import | ast.ImportFrom) or _dynamic_import(n)
            for n in ast.walk(nodes[0])
        ), f"{path}:{function} imports nothing any more"


def test_the_check_sees_imports_in_methods_nested_functions_and_dynamic_names(tmp_path):
    (tmp_path / "tenancy" / "api").mkdir(parents=True)
    (tmp_path / "tenancy" / "api" / "late.py").write_text(
        "import json\n"
        "from tenancy import roles\n"
        "class Late:\n"
        "    def method(self):\n"
        "        import numpy\n"
        "        from .access import Access\n"
        "def outer():\n"
        "    def inner():\n"
        "        from rag_project.celery import enqueue\n"
        "    return __import__(name)\n"
    )
    assert local_imports("tenancy", tmp_path) == [
        "tenancy/api/late.py:6 (Late.method): imports tenancy.api.access",
        "tenancy/api/late.py:9 (outer): imports rag_project.celery",
        "tenancy/api/late.py:10 (outer): imports a name made there",
    ]
