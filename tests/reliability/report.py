"""A pytest plugin that ends the run with a table: fault | what was checked | passed.

``make reliability`` loads it (``-p tests.reliability.report``). A row is a test: the fault is
named by its file (``FAULTS``), what was checked by the first line of its docstring (else its
name), and passed is yes, NO or skipped.
"""

from __future__ import annotations

import pytest

FAULTS = {
    "tests/reliability/faults/test_redis_outage.py": "Redis stopped",
    "tests/reliability/faults/test_postgres_restart.py": "PostgreSQL restarted",
    "tests/reliability/faults/test_embedding_faults.py": "Embedding provider faults",
    "tests/reliability/test_load.py": "Load with concurrent change",
    "tests/knowledge/test_ingestion_worker.py": "Worker killed mid-document",
    "tests/retrieval/test_bm25_store.py": "Tampered L2/L3 payload, Redis down",
    "tests/retrieval/test_bm25_invalidation.py": "Invalidation by another process",
    "tests/reliability/test_bad_input.py": "Bad input",
}

_rows: dict[str, list] = {}


def _describe(item: pytest.Item) -> tuple[str, str]:
    path = item.nodeid.split("::", 1)[0]
    fault = FAULTS.get(path, path)
    doc = ((getattr(item, "function", None) and item.function.__doc__) or "").strip()
    what = doc.splitlines()[0] if doc else item.originalname.removeprefix("test_").replace("_", " ")
    if getattr(item, "callspec", None):
        what += f" [{item.callspec.id}]"
    return fault, what


def pytest_collection_finish(session):
    for item in session.items:  # after -k / -m deselection
        fault, what = _describe(item)
        _rows[item.nodeid] = [fault, what, "not run", 0.0]


def pytest_runtest_logreport(report):
    row = _rows.get(report.nodeid)
    if row is None:
        return
    row[3] += report.duration
    if report.failed:
        row[2] = "NO"
    elif report.skipped and row[2] != "NO":
        row[2] = "skipped"
    elif report.when == "call" and report.passed and row[2] != "NO":
        row[2] = "yes"


def pytest_terminal_summary(terminalreporter):
    if not _rows:
        return
    header = ("fault", "what was checked", "passed", "s")
    rows = [(f, w, p, f"{d:.1f}") for f, w, p, d in _rows.values()]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    line = " | ".join("{:<%d}" % w for w in widths)  # noqa: UP031
    write = terminalreporter.write_line
    terminalreporter.section("reliability")
    write(line.format(*header))
    write("-+-".join("-" * w for w in widths))
    for row in rows:
        write(line.format(*row))
