"""The pure core (analysis, parsing, chunking, BM25 and its cache, embedded services) imports
without Django settings, as docs/design.md asks, so it can be used and tested on its own; so does
the search vocabulary (types and filters), which the remote LangChain classes read."""

import subprocess
import sys

import pytest

from tests.conftest import CEILING_S, REPO, subprocess_env

PURE_MODULES = [
    "rag_project.embedded",
    "knowledge.embeddings.http_retry",
    "retrieval.bm25",
    "retrieval.core.lru",
    "retrieval.core.filters",
    "retrieval.search.types",
    "knowledge.analysis",
    "knowledge.ingestion.parsing",
    "knowledge.ingestion.chunking",
]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_without_django_settings(module):
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "from django.conf import settings; print(settings.configured)"
    )
    env = subprocess_env()
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
