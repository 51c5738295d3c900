"""Tasks queued by name (``enqueue("knowledge.process_document", ...)``) are tasks a worker
runs: every name the code gives ``enqueue`` is checked against the registered tasks here, and
a name no task has is refused where it is queued, never sent where no worker takes it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rag_project.celery import app, enqueue
from tests.conftest import CEILING_S, REPO, subprocess_env

APPS = ["rag_project", "tenancy", "knowledge", "retrieval"]


def queued_names(root: Path = REPO) -> dict[str, list[str]]:
    """Every literal task name given to ``enqueue`` in the apps' code, with where it is."""
    found: dict[str, list[str]] = {}
    for app_name in APPS:
        for path in sorted((root / app_name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = node.args[0]
                if called == "enqueue" and isinstance(first, ast.Constant):
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.setdefault(str(first.value), []).append(where)
    return found


def run_fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a new Python process of the project; it must succeed."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_every_task_name_given_to_enqueue_is_registered():
    app.loader.import_default_modules()  # what a worker imports at start
    names = queued_names()
    # the check reads the services that queue by name (a moved tree would leave it nothing)
    assert {"knowledge.process_document", "knowledge.sync_web_source"} <= set(names)
    unknown = {name: where for name, where in names.items() if name not in app.tasks}
    assert not unknown, f"names no task is registered under: {unknown}"


def test_the_check_finds_a_misspelt_name(tmp_path):
    (tmp_path / "knowledge").mkdir()
    (tmp_path / "knowledge" / "late.py").write_text(
        "from rag_project import celery\n\n"
        "def queue(pk):\n"
        "    celery.enqueue('knowledge.proces_document', pk, fold=('k', 1))\n"
    )
    assert queued_names(tmp_path) == {"knowledge.proces_document": ["knowledge/late.py:4"]}


def test_a_name_no_task_has_is_refused_where_it_is_queued():
    with pytest.raises(LookupError, match=r"'knowledge\.proces_document'"):
        enqueue("knowledge.proces_document", 1)


def test_a_process_that_imported_no_tasks_module_finds_tasks_by_name():
    """A web process imports no tasks module: the name is found all the same."""
    code = (
        "import sys, django; django.setup()\n"
        "from rag_project.celery import registered_task\n"
        "assert 'knowledge.tasks' not in sys.modules, 'imported before the lookup'\n"
        "print(registered_task('knowledge.process_document').name)\n"
    )
    result = run_fresh(code)
    assert result.stdout.strip() == "knowledge.process_document"


def test_threads_looking_up_names_at_once_in_a_fresh_process_all_find_them():
    """A threaded web worker's first uploads come at once: every thread finds the task, none
    sees the tasks module half imported by another."""
    code = (
        "import threading\n"
        "import rag_project.wsgi  # as gunicorn loads a web worker\n"
        "from rag_project.celery import registered_task\n"
        "barrier, missing = threading.Barrier(12), []\n"
        "def look():\n"
        "    barrier.wait()\n"
        "    try:\n"
        "        registered_task('knowledge.dispatch_documents')\n"
        "    except LookupError as exc:\n"
        "        missing.append(str(exc))\n"
        "threads = [threading.Thread(target=look) for _ in range(12)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(len(missing))\n"
    )
    result = run_fresh(code)
    assert result.stdout.strip() == "0"
