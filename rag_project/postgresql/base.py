"""PostgreSQL backend: Django's, with a health check that costs no round trip when it can.

``CONN_HEALTH_CHECKS`` makes Django send ``SELECT 1`` on a persistent connection before the
first query of every request, so a connection that died with a restarted server is replaced
instead of failing the request. That is one more round trip per request (a search makes two or
three queries of its own), paid in the web process and the server alike.

A server that ends a connection (restart, ``pg_terminate_backend``, an idle timeout, a crashed
backend) sends its error and closes the socket, so an idle connection's socket is readable.
Here the check first asks the operating system whether there is anything to read, with a
zero timeout: nothing to read on an idle connection that psycopg does not know to be broken
means nothing has happened to it, and no query is sent. Anything to read (the server's
goodbye, or an asynchronous notice) and any connection not idle get Django's ``SELECT 1``
as before. What neither check can see quickly is a peer that vanished without closing (a
network partition): ``SELECT 1`` would wait for TCP to give up there too.
"""

from __future__ import annotations

import select

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.operations import DatabaseOperations as BaseOperations
from psycopg import pq


class PreparingCursor(psycopg.Cursor):
    """Binds parameters on the server and runs every query as a prepared statement of its
    connection (``DatabaseWrapper.prepared_cursor``).

    A prepared statement whose result columns changed type since it was prepared (a migration
    run by another process) fails with "cached plan must not change result type" until it is
    deallocated. Outside a transaction the failed statement leaves nothing to roll back: the
    connection's statements are deallocated (psycopg forgets its own on ``DEALLOCATE ALL``)
    and the query runs once more, prepared afresh. Inside one, the error is the caller's."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        prepare = True if prepare is None else prepare
        try:
            return super().execute(query, params, prepare=prepare, binary=binary)
        except psycopg.errors.FeatureNotSupported as exc:
            changed = "cached plan must not change result type" in str(exc)
            if not changed or self.connection.info.transaction_status != pq.TransactionStatus.IDLE:
                raise
            self.connection.execute("DEALLOCATE ALL")
            return super().execute(query, params, prepare=prepare, binary=binary)


class DatabaseOperations(BaseOperations):
    def last_executed_query(self, cursor, sql, params):
        # Django reads a client-binding cursor's merged query; a prepared one has none.
        if isinstance(cursor, PreparingCursor):
            return self.compose_sql(sql, params)
        return super().last_executed_query(cursor, sql, params)


# Executions of a query before psycopg prepares it on its own: never, in effect. Only
# ``prepared_cursor``'s queries ask to be prepared (Django's client-binding cursors never are).
_ONLY_WHEN_ASKED = 2**31 - 1


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_connection_params(self):
        params = super().get_connection_params()
        # Django passes None (prepared statements off) unless OPTIONS says otherwise; psycopg
        # then refuses even an explicit ``prepare=True``.
        if settings.DB_PREPARED_STATEMENTS and params.get("prepare_threshold") is None:
            params["prepare_threshold"] = _ONLY_WHEN_ASKED
        return params

    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None
            and self.health_check_enabled
            and not self.health_check_done
            and not self.pool
            and self._quiet()
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def _quiet(self) -> bool:
        """The connection is idle, not known broken, and the server has sent nothing since."""
        conn = self.connection
        if conn.closed or conn.broken:
            return False
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        try:
            poller = select.poll()
            poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
            return not poller.poll(0)
        except (OSError, ValueError):  # a closed descriptor
            return False

    def prepared_cursor(self):
        """A cursor for the search path's few hot queries (``rag_project.rawsql``): each runs
        as a prepared statement of this persistent connection, parsed and planned once per
        connection instead of on every request: parsing and planning, not running, are most of
        what these short queries cost the server (figures: docs/performance.md, "Figures
        behind choices in the code").

        Django's own cursors bind parameters in the client and never prepare (the ORM's SQL
        is not written for server-side binding, and Django turns prepared statements off so
        that poolers in transaction mode keep working); this one is made by the same path
        (the health check, the time zone, query logging, execute wrappers, error
        translation). With
        ``DB_PREPARED_STATEMENTS`` off (a pooler that cannot keep prepared statements) it is
        an ordinary cursor."""
        if not settings.DB_PREPARED_STATEMENTS:
            return self.cursor()
        self.ensure_connection()
        # Django's own path to a cursor, with psycopg making this one a PreparingCursor (the
        # connection is this thread's alone).
        connection = self.connection
        factory, connection.cursor_factory = connection.cursor_factory, PreparingCursor
        try:
            return self._cursor()
        finally:
            connection.cursor_factory = factory
