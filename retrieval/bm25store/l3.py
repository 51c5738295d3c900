"""L3: the knowledge base's ``bm25_manifests`` row and its ``bm25_indexes`` segment rows.

A manifest write is one upsert that never replaces a newer version, and a merge's replaces the
same version only if it is still the one merged (compare-and-set on the signature). Payloads
travel as binary through a server-side-binding psycopg cursor (client-side binding would inline
them as hex, twice their size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import psycopg
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from retrieval.bm25store.manifest import Manifest
from retrieval.bm25store.payload import SignedPayload, manifest_label, segment_label
from retrieval.core.identity import Identity
from retrieval.models import BM25Manifest, BM25Segment

_MANIFESTS = BM25Manifest._meta.db_table
_SEGMENTS = BM25Segment._meta.db_table

_SELECT_MANIFEST = f"""
    SELECT version, signature, payload FROM {_MANIFESTS}
    WHERE knowledge_base_id = %s AND tenant_id = %s AND version >= %s
"""  # noqa: S608 - the table names are ours
_UPSERT_MANIFEST = f"""
    INSERT INTO {_MANIFESTS} AS row (knowledge_base_id, tenant_id, version, payload, signature,
        segment_count, chunk_count, deleted_count, merges, build_seconds, built_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())
    ON CONFLICT (knowledge_base_id) DO UPDATE SET
        tenant_id = EXCLUDED.tenant_id, version = EXCLUDED.version, payload = EXCLUDED.payload,
        signature = EXCLUDED.signature, segment_count = EXCLUDED.segment_count,
        chunk_count = EXCLUDED.chunk_count, deleted_count = EXCLUDED.deleted_count,
        merges = EXCLUDED.merges, build_seconds = EXCLUDED.build_seconds,
        built_at = EXCLUDED.built_at
    WHERE row.version < EXCLUDED.version
       OR (row.version = EXCLUDED.version AND (%s::text IS NULL OR row.signature = %s::text))
"""  # noqa: S608
_SELECT_SEGMENTS = f"""
    SELECT key, signature, payload FROM {_SEGMENTS}
    WHERE knowledge_base_id = %s AND tenant_id = %s AND key = ANY(%s)
"""  # noqa: S608
_INSERT_SEGMENT = f"""
    INSERT INTO {_SEGMENTS} (knowledge_base_id, tenant_id, key, payload, signature,
        chunk_count, postings, payload_bytes, build_seconds, built_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now())
    ON CONFLICT (knowledge_base_id, key) DO NOTHING
"""  # noqa: S608


@contextmanager
def _binary_cursor() -> Iterator[psycopg.Cursor]:
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


def _bytes(data) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


class TableTier:
    def get(self, identity: Identity, min_version: int) -> tuple[int, SignedPayload] | None:
        """The manifest (version, payload) if it holds at least ``min_version``."""
        with _binary_cursor() as cursor:
            cursor.execute(
                _SELECT_MANIFEST,
                [identity.knowledge_base_id, identity.tenant_id, min_version],
                binary=True,
            )
            row = cursor.fetchone()
        if row is None:
            return None
        version, signature, data = row
        return version, SignedPayload(manifest_label(version), signature, _bytes(data))

    def version(self, knowledge_base_id: int) -> int | None:
        return (
            BM25Manifest.objects.filter(knowledge_base_id=knowledge_base_id)
            .values_list("version", flat=True)
            .first()
        )

    def put(
        self,
        tenant_id: int,
        knowledge_base_id: int,
        manifest: Manifest,
        payload: SignedPayload,
        replaces: str | None = None,
    ) -> bool:
        """Write the manifest unless a newer version is stored (with ``replaces``: unless the
        stored one of the same version has another signature); whether it was written."""
        try:
            with transaction.atomic(), _binary_cursor() as cursor:
                cursor.execute(
                    _UPSERT_MANIFEST,
                    [
                        knowledge_base_id,
                        tenant_id,
                        manifest.version,
                        payload.data,
                        payload.signature,
                        len(manifest.keys),
                        manifest.chunk_count,
                        int(manifest.deleted.size),
                        manifest.merges,
                        manifest.build_seconds,
                        replaces,
                        replaces,
                    ],
                )
                return cursor.rowcount == 1
        except IntegrityError:  # the knowledge base is gone
            return False

    def drop(self, knowledge_base_id: int, signature: str, key: str | None = None) -> None:
        """Delete the segment ``key`` (else the manifest) if it still has ``signature``."""
        rows = BM25Manifest.objects if key is None else BM25Segment.objects.filter(key=key)
        rows.filter(knowledge_base_id=knowledge_base_id, signature=signature).delete()

    def delete(self, knowledge_base_id: int) -> None:
        """The manifest and every segment."""
        BM25Manifest.objects.filter(knowledge_base_id=knowledge_base_id).delete()
        BM25Segment.objects.filter(knowledge_base_id=knowledge_base_id).delete()

    def get_segments(self, identity: Identity, keys: Sequence[str]) -> dict[str, SignedPayload]:
        if not keys:
            return {}
        with _binary_cursor() as cursor:
            cursor.execute(
                _SELECT_SEGMENTS,
                [identity.knowledge_base_id, identity.tenant_id, list(keys)],
                binary=True,
            )
            rows = cursor.fetchall()
        return {
            key: SignedPayload(segment_label(key), signature, _bytes(data))
            for key, signature, data in rows
        }

    def put_segment(
        self,
        tenant_id: int,
        knowledge_base_id: int,
        key: str,
        payload: SignedPayload,
        chunk_count: int,
        postings: int,
        build_seconds: float,
    ) -> bool:
        try:
            with transaction.atomic(), _binary_cursor() as cursor:
                cursor.execute(
                    _INSERT_SEGMENT,
                    [
                        knowledge_base_id,
                        tenant_id,
                        key,
                        payload.data,
                        payload.signature,
                        chunk_count,
                        postings,
                        len(payload.data),
                        build_seconds,
                    ],
                )
                return cursor.rowcount == 1
        except IntegrityError:  # the knowledge base is gone
            return False

    def mark_dropped(self, knowledge_base_id: int, keys: Sequence[str]) -> None:
        """Segments a merge folded away: deleted by ``collect_garbage`` after the grace."""
        if keys:
            BM25Segment.objects.filter(
                knowledge_base_id=knowledge_base_id, key__in=list(keys), dropped_at__isnull=True
            ).update(dropped_at=timezone.now())

    def collect_garbage(
        self,
        knowledge_base_id: int,
        keys_of: Callable[[bytes, str, int], Sequence[str]],
        grace_s: float,
    ) -> int:
        """Delete the segments the stored manifest does not name that a merge dropped more
        than ``grace_s`` ago, or that no manifest took up within an hour; the manifest row is
        locked meanwhile. ``keys_of(payload, signature, version)``: the stored manifest's keys."""
        now = timezone.now()
        with transaction.atomic():
            row = (
                BM25Manifest.objects.select_for_update()
                .filter(knowledge_base_id=knowledge_base_id)
                .values_list("payload", "signature", "version")
                .first()
            )
            keep = list(keys_of(_bytes(row[0]), row[1], row[2])) if row else []
            deleted, _ = (
                BM25Segment.objects.filter(knowledge_base_id=knowledge_base_id)
                .filter(
                    Q(dropped_at__lt=now - timedelta(seconds=grace_s))
                    | Q(built_at__lt=now - timedelta(hours=1))
                )
                .exclude(key__in=keep)
                .delete()
            )
        return deleted
