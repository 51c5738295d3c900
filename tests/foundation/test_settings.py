"""Settings come from the environment, each one documented; production refuses an unsafe
configuration."""

import ast
import re
import subprocess
import sys

from tests.conftest import CEILING_S, REPO, subprocess_env

SETTINGS = REPO / "rag_project" / "settings"
CONFIGURATION = REPO / "docs" / "configuration.md"

SETUP = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"


def run_with(**env: str) -> subprocess.CompletedProcess:
    environment = subprocess_env(**env)
    for name in ("SECRET_KEY", "DEBUG"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", SETUP],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = run_with(DJANGO_SETTINGS_MODULE="rag_project.settings.production")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_refuses_a_development_secret_key():
    result = run_with(
        DJANGO_SETTINGS_MODULE="rag_project.settings.production",
        SECRET_KEY="django-insecure-" + "x" * 60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_starts_with_a_real_secret_key_and_debug_off():
    result = run_with(
        DJANGO_SETTINGS_MODULE="rag_project.settings.production",
        SECRET_KEY="k3J9-" + "aZ8q_Lm2" * 8,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_development_defaults_to_debug_and_env_overrides_it():
    assert (
        run_with(DJANGO_SETTINGS_MODULE="rag_project.settings.development").stdout.strip() == "True"
    )
    result = run_with(DJANGO_SETTINGS_MODULE="rag_project.settings.development", DEBUG="false")
    assert result.stdout.strip() == "False"


def environment_reads() -> dict[str, str]:
    """Every variable the settings modules read through django-environ (``env.int("NAME", ...)``,
    ``env("NAME")``...), with where it is read."""
    found: dict[str, str] = {}
    for path in sorted(SETTINGS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            function = node.func
            reads_env = (isinstance(function, ast.Name) and function.id == "env") or (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Name)
                and function.value.id == "env"
            )
            name = node.args[0]
            if reads_env and isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.setdefault(name.value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def documented_variables() -> set[str]:
    """Variables named in the first column of a table row of docs/configuration.md that gives a
    default and a meaning (neither cell empty, the default not a pointer elsewhere)."""
    documented: set[str] = set()
    for line in CONFIGURATION.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or set(cells[0]) <= {"-", " "}:
            continue
        default, meaning = cells[1], cells[2]
        if default and meaning and not default.lower().startswith("see "):
            documented.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]))
    return documented


def test_the_settings_read_some_variables():
    reads = environment_reads()
    assert {"SECRET_KEY", "DATABASE_URL", "BM25_DEFER_BUILD_S", "TEST_REDIS_URL"} <= set(reads)


def test_every_variable_the_settings_read_is_documented_with_its_default():
    reads = environment_reads()
    missing = sorted(set(reads) - documented_variables())
    assert not missing, (
        "read from the environment but not documented in docs/configuration.md (a table row: "
        "name, default, meaning): " + ", ".join(f"{name} ({reads[name]})" for name in missing)
    )
