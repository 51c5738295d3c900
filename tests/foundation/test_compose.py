"""docker-compose.yml cannot run here (no Docker engine), so it is checked by reading: against
the Compose specification's JSON schema, and for the wiring this project depends on."""

import subprocess
import sys

import yaml

from tests.conftest import CEILING_S, REPO


def load() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_file_validates_against_the_compose_spec_schema():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(REPO / "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_runs_every_part_on_real_services_with_healthchecks():
    services = load()["services"]
    assert set(services) == {"db", "redis", "web", "worker", "beat"}
    assert services["db"]["image"].startswith("pgvector/pgvector:")
    for name in ("db", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "rag_project.settings.production"
        assert env["DATABASE_URL"].startswith("postgres://") and "@db:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert ":?" in env["SECRET_KEY"]  # compose refuses to start without one
        assert services[name]["depends_on"]["db"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "gunicorn" in services["web"]["command"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "rag_project", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "rag_project", "beat"]
