"""The client package (clients/python) as an agent installs it: into a fresh virtual environment
from the repository, without Django, Celery or psycopg, its own tests run there against this
project's live server (LangChain's standard retriever suite among them)."""

import shutil
import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.conftest import CEILING_S, REPO
from tests.langchain.conftest import make_manuals

PACKAGE = REPO / "clients" / "python"
SERVER_ONLY = ("django", "celery", "psycopg", "rest_framework")


def run(*command, **options) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=CEILING_S * 2, check=False, **options
    )


@pytest.mark.slow
def test_the_package_installs_alone_and_passes_its_tests_against_the_live_server(
    live_server, tenant, make_key, tmp_path
):
    # The versions this environment runs with, so the fresh one resolves from pip's cache to
    # what the server's tests use (langchain-tests and its pytest plug-ins included).
    freeze = run(sys.executable, "-m", "pip", "freeze", "--exclude-editable")
    assert freeze.returncode == 0, freeze.stderr
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "\n".join(line for line in freeze.stdout.splitlines() if "==" in line) + "\n"
    )
    # Built from a copy, so the build leaves nothing in the repository.
    package = tmp_path / "rag-kb-client"
    shutil.copytree(
        PACKAGE, package, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", str(venv))
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installed = run(
        python, "-m", "pip", "install", "--quiet", "-c", str(constraints), f"{package}[test]"
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    probe = run(
        python,
        "-c",
        "import importlib.util as u, rag_kb_client.langchain; "
        f"print([m for m in {SERVER_ONLY!r} if u.find_spec(m)])",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"  # none of the server's stack came along
    assert find_spec("django") is not None  # (while this environment has it)

    kb, hidden = make_manuals(tenant), make_manuals(tenant, name="Hidden")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAG_KB_URL": live_server.url,
        "RAG_KB_API_KEY": make_key(tenant, scopes=("read",), kbs=[kb]),
        "RAG_KB_KNOWLEDGE_BASE_ID": str(kb.pk),
        "RAG_KB_HIDDEN_KNOWLEDGE_BASE_ID": str(hidden.pk),
    }
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package, env=env)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-2000:]
    summary = tests.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
