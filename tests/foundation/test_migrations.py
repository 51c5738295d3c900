"""Migrations build the whole schema on an empty database and match the models."""

import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection

from tests.conftest import CEILING_S, REPO, subprocess_env


def admin_connect():
    params = connection.get_connection_params()
    params["dbname"] = "postgres"
    return psycopg.connect(**params, autocommit=True)


@pytest.mark.django_db
def test_migrations_apply_on_an_empty_database():
    name = f"rag_migrate_{uuid.uuid4().hex[:8]}"
    with admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env = subprocess_env(
            DJANGO_SETTINGS_MODULE="rag_project.settings.test", RAG_TEST_DB_NAME=name
        )
        result = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=CEILING_S,
        )
        assert result.returncode == 0, result.stderr
        params = connection.get_connection_params()
        params["dbname"] = name
        with psycopg.connect(**params) as conn:
            tables = {
                row[0]
                for row in conn.execute(
                    "select tablename from pg_tables where schemaname = 'public'"
                )
            }
            extension = conn.execute(
                "select extversion from pg_extension where extname = 'vector'"
            ).fetchone()
            column = conn.execute(
                "select udt_name from information_schema.columns "
                "where table_name = 'knowledge_chunk' and column_name = 'embedding'"
            ).fetchone()
        assert {
            "bm25_indexes",
            "knowledge_chunk",
            "knowledge_document",
            "knowledge_knowledgebase",
            "knowledge_apikey",
        } <= tables
        assert extension is not None
        assert column == ("vector",)
    finally:
        with admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_models_and_migrations_agree():
    env = subprocess_env(DJANGO_SETTINGS_MODULE="rag_project.settings.test")
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
