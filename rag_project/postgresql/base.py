"""PostgreSQL backend: Django's, with a health check that costs no round trip when it can.

``CONN_HEALTH_CHECKS`` makes Django send ``SELECT 1`` on a persistent connection before the
first query of every request, so a connection that died with a restarted server is replaced
instead of failing the request. That is one more round trip per request (a search makes three
queries of its own), paid in the web process and the server alike.

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

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
