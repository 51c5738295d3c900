"""Settings come from the environment; production refuses an unsafe configuration."""

import subprocess
import sys

from tests.conftest import CEILING_S, REPO, subprocess_env

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
