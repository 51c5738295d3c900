"""The apps depend in one direction only: rag_project <- tenancy <- knowledge <- retrieval.

Each app imports itself and the apps to its left, never one to its right: ``rag_project`` (the
project: settings, URLconf, Celery, embedded services) imports no app and names them by dotted
strings; ``tenancy`` builds on ``rag_project`` only; ``knowledge`` never imports ``retrieval``
(``retrieval`` reacts to knowledge's signals instead). ``bench`` may import anything and nothing
but the tests imports it. Every import counts, including ones inside functions (a lazy import is
still a dependency) and ``importlib.import_module``/``__import__`` of a literal name.
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


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, at any depth: top level,
    functions, classes, ``if TYPE_CHECKING`` blocks, and import_module/__import__ of a literal."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            literal = first.value if isinstance(first, ast.Constant) else None
            if called in ("import_module", "__import__") and isinstance(literal, str):
                found.append((node.lineno, literal))
    return sorted(found)


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
