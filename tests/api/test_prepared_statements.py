"""The search path's hot queries as prepared statements (``rag_project.postgresql``:
``prepared_cursor``): a search of one knowledge base through the REST API prepares exactly
those three on its connection (the key, the knowledge base, hydration), answers as
it does without them, and still goes through Django's wrappers."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from tests.api.conftest import API, MANUALS, make_kb

pytestmark = pytest.mark.django_db(transaction=True)

HOT = (
    "FROM knowledge_apikey k",
    "FROM knowledge_knowledgebase WHERE tenant_id",
    "FROM knowledge_chunk c JOIN",
)


def prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")
        return [row[0] for row in cursor.fetchall()]


def search(client, kb) -> list[tuple[int, float]]:
    response = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump seal", "top_k": 3}, format="json"
    )
    assert response.status_code == 200, response.content
    return [(hit["chunk_id"], hit["score"]) for hit in response.json()["results"]]


def test_a_search_prepares_its_hot_queries_and_answers_as_without(client, tenant, settings):
    kb = make_kb(tenant, documents=MANUALS)
    connection.close()  # a new connection: nothing prepared yet
    first = search(client, kb)
    statements = prepared()
    assert len(statements) == 3
    assert all(any(part in s for s in statements) for part in HOT), statements
    assert search(client, kb) == first
    assert len(prepared()) == 3  # reused, not prepared again

    settings.DB_PREPARED_STATEMENTS = False
    connection.close()
    assert search(client, kb) == first
    assert prepared() == []


def test_prepared_queries_are_logged_and_their_errors_are_djangos(client, tenant):
    kb = make_kb(tenant, documents=MANUALS)
    with CaptureQueriesContext(connection) as queries:
        search(client, kb)
    logged = " ".join(query["sql"] for query in queries.captured_queries)
    assert all(part in logged for part in HOT)
    with (
        pytest.raises(DatabaseError, match="no_such_table"),
        connection.prepared_cursor() as cursor,
    ):
        cursor.execute("SELECT * FROM no_such_table WHERE id = %s", [1])
    # The connection serves on after the failed statement.
    assert search(client, kb)


def test_a_statement_whose_columns_changed_type_elsewhere_is_prepared_again():
    """Another process's migration changes the type of a column a prepared statement reads:
    the statement is prepared afresh instead of failing on every later search."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE prepared_probe (id int PRIMARY KEY, v int)")
        cursor.execute("INSERT INTO prepared_probe VALUES (1, 7)")
    query = "SELECT v FROM prepared_probe WHERE id = %s"
    try:
        with connection.prepared_cursor() as cursor:
            cursor.execute(query, [1])
            assert cursor.fetchone() == (7,)
        other = connection.copy()
        try:
            with other.cursor() as cursor:
                cursor.execute("ALTER TABLE prepared_probe ALTER COLUMN v TYPE text")
        finally:
            other.close()
        with connection.prepared_cursor() as cursor:
            cursor.execute(query, [1])
            assert cursor.fetchone() == ("7",)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE prepared_probe")
