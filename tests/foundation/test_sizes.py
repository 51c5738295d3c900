"""Every production module readable at once: at most ``MODULE_LINES`` lines, no function over
``FUNCTION_LINES`` (its ``def`` line to its last, docstring included). Migrations are generated
and left out; benchmarks and tests are tools, not the product."""

from __future__ import annotations

import ast

from tests.conftest import REPO

PRODUCT = ["rag_project", "tenancy", "knowledge", "retrieval", "clients"]
MODULE_LINES, FUNCTION_LINES = 600, 80


def product_modules():
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def test_no_production_module_is_longer_than_it_can_be_read_at_once():
    long = {}
    for path in product_modules():
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            long[str(path.relative_to(REPO))] = lines
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_no_production_function_is_longer_than_it_can_be_read_at_once():
    long = {}
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"
