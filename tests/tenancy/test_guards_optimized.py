"""The tenant guards survive ``python -O``: test_guards.py, run in a subprocess under ``-O``
(which strips every ``assert``), still sees each cross-tenant write refused and nothing written.

A guard written as ``assert kb.tenant_id == tenant.pk`` passes every ordinary test run and
vanishes in a production interpreter started with -O; only a run under -O can tell.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import REPO, subprocess_env

GUARDS = Path(__file__).with_name("test_guards.py")


def guard_tests(path: Path) -> list[str]:
    """The module's tests: one per module-level ``test_`` function (it has no parametrized
    ones, so this is also the number of tests a run must report)."""
    functions = [
        node
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    for node in functions:
        if any("parametrize" in ast.unparse(d) for d in node.decorator_list):
            raise AssertionError(f"{node.name} is parametrized: count its cases here")
    return [node.name for node in functions]


def test_the_tenant_guards_hold_under_python_dash_o(tmp_path):
    expected = guard_tests(GUARDS)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    number = int(worker[2:]) if worker[2:].isdigit() else 0
    report = tmp_path / "guards.xml"
    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="rag_project.settings.test",
        EXPECT_OPTIMIZED="1",
        # A Redis database, Celery queue and media folder of its own (the test settings derive
        # them from the worker name), so the run neither flushes nor reads this worker's...
        PYTEST_XDIST_WORKER=f"gw{32 + number}",
        # ...and a test database of its own, which its pytest-django creates and drops.
        RAG_TEST_DB_NAME=f"rag_optimized_{worker}",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-O",
            "-m",
            "pytest",
            str(GUARDS.relative_to(REPO)),
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestConfigWarning",  # "assert statements are not executed": yes
            f"--junitxml={report}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a ceiling for a hung run only; it takes seconds
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    suite = ET.parse(report).getroot().find("testsuite")
    counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": len(expected), "failures": 0, "errors": 0, "skipped": 0}, output
    passed = sorted(case.get("name") for case in suite.iter("testcase"))
    assert passed == sorted(expected), output
