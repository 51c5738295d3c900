"""L3: the ``bm25_indexes`` row of a knowledge base (see retrieval.models.BM25Index).

Plain SQL on purpose: a read fetches a payload (megabytes for a large KB) in one query and
only when the row's version is recent enough, and a write is one upsert that never replaces a
newer version (a slow builder of an old version cannot undo a faster one's work).

The payload travels as binary both ways through a server-side-binding psycopg cursor on
Django's connection: Django's client-side binding would inline it as a hex literal twice its
size, and text-format results hex-encode it too, each several times slower than binary (see
docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import IntegrityError, connection, transaction

from retrieval.bm25store.payload import SignedPayload
from retrieval.models import BM25Index as BM25IndexRow

_TABLE = BM25IndexRow._meta.db_table

_SELECT = f"""
    SELECT version, signature, payload FROM {_TABLE}
    WHERE knowledge_base_id = %s AND tenant_id = %s AND version >= %s
"""  # noqa: S608 - the table name is ours
_UPSERT = f"""
    INSERT INTO {_TABLE} AS row (knowledge_base_id, tenant_id, version, payload, signature,
                                 chunk_count, payload_bytes, build_seconds, built_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())
    ON CONFLICT (knowledge_base_id) DO UPDATE SET
        tenant_id = EXCLUDED.tenant_id, version = EXCLUDED.version, payload = EXCLUDED.payload,
        signature = EXCLUDED.signature, chunk_count = EXCLUDED.chunk_count,
        payload_bytes = EXCLUDED.payload_bytes, build_seconds = EXCLUDED.build_seconds,
        built_at = EXCLUDED.built_at
    WHERE row.version <= EXCLUDED.version
"""  # noqa: S608


@contextmanager
def _binary_cursor() -> Iterator[psycopg.Cursor]:
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


class TableTier:
    def get(self, tenant_id: int, knowledge_base_id: int, min_version: int) -> SignedPayload | None:
        with _binary_cursor() as cursor:
            cursor.execute(_SELECT, [knowledge_base_id, tenant_id, min_version], binary=True)
            row = cursor.fetchone()
        if row is None:
            return None
        version, signature, data = row
        # psycopg returns bytes; a memoryview (other drivers) is copied once, here.
        return SignedPayload(version, signature, data if isinstance(data, bytes) else bytes(data))

    def version(self, knowledge_base_id: int) -> int | None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT version FROM {_TABLE} WHERE knowledge_base_id = %s",  # noqa: S608
                [knowledge_base_id],
            )
            row = cursor.fetchone()
        return row[0] if row else None

    def put(
        self,
        tenant_id: int,
        knowledge_base_id: int,
        payload: SignedPayload,
        chunk_count: int,
        build_seconds: float,
    ) -> bool:
        """Write unless a newer version is stored; False too if the KB was deleted meanwhile."""
        try:
            with transaction.atomic(), _binary_cursor() as cursor:
                cursor.execute(
                    _UPSERT,
                    [
                        knowledge_base_id,
                        tenant_id,
                        payload.version,
                        payload.data,
                        payload.signature,
                        chunk_count,
                        len(payload.data),
                        build_seconds,
                    ],
                )
                return cursor.rowcount == 1
        except IntegrityError:  # the knowledge base is gone
            return False

    def drop(self, knowledge_base_id: int, signature: str) -> None:
        """Delete the row that failed its check (not one a builder wrote since)."""
        BM25IndexRow.objects.filter(
            knowledge_base_id=knowledge_base_id, signature=signature
        ).delete()

    def delete(self, knowledge_base_id: int) -> None:
        BM25IndexRow.objects.filter(knowledge_base_id=knowledge_base_id).delete()
