"""One consistent read of a knowledge base: its ``index_version`` and the rows it labels.

A BM25 build and a vector matrix's load read the version first and then the documents and
chunks in the same REPEATABLE READ snapshot, so the version they are labelled with is exactly
the data they hold.
"""

from __future__ import annotations

from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextmanager
def snapshot(using: str | None = None):
    """A REPEATABLE READ, read-only transaction on database ``using`` (default: the primary),
    or the caller's own there, if one is open."""
    connection = connections[using or DEFAULT_DB_ALIAS]
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=connection.alias):
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield
