"""The PostgreSQL backend's health check (``rag_project.postgresql``): no round trip for a
quiet idle connection, Django's ``SELECT 1`` (and a new connection) for one the server ended."""

import pytest
from django.db import connection

from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _last_query_of(pid: int) -> str:
    """What the server last ran for backend ``pid``, asked on a connection of its own."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
            (query,) = cursor.fetchone()
            return query
    finally:
        other.close()


def _terminate(pid: int) -> None:
    """Ends backend ``pid`` as a restarted server would, and returns once it has gone (it has
    sent its goodbye by then)."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

            def gone() -> bool:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                return cursor.fetchone()[0] == 0

            wait_until(gone, f"backend {pid} to end")
    finally:
        other.close()


def _request_starts() -> None:
    """As at the start of a request with ``CONN_HEALTH_CHECKS``: the next use checks."""
    connection.health_check_enabled = True
    connection.health_check_done = False


def test_a_quiet_idle_connection_is_trusted_without_a_query():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'marker-before-the-check'")
        pid = connection.connection.info.backend_pid
    _request_starts()
    connection.close_if_health_check_failed()
    assert connection.health_check_done
    assert connection.connection is not None
    assert connection.connection.info.backend_pid == pid
    assert _last_query_of(pid) == "SELECT 'marker-before-the-check'"


def test_a_connection_the_server_ended_is_replaced_before_the_next_query():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        pid = connection.connection.info.backend_pid
    _terminate(pid)
    _request_starts()
    with connection.cursor() as cursor:  # checks first, as the request's first query does
        cursor.execute("SELECT pg_backend_pid()")
        (now,) = cursor.fetchone()
    assert now != pid


def test_a_connection_inside_a_transaction_gets_the_round_trip_check():
    from django.db import transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 'inside'")
            pid = connection.connection.info.backend_pid
        _request_starts()
        connection.close_if_health_check_failed()
        assert _last_query_of(pid) == "SELECT 1"
