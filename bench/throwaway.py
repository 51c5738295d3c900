"""Throwaway tenants for the benchmarks: created under a unique tag, removed with all they hold.

Removal deletes chunks with one raw DELETE (the ORM would load every chunk to cascade), stored
files, this process's cached BM25 indexes and vector matrices (and their L2/L3 entries), then
the tenants; outside a transaction it VACUUMs the chunk table (after a large run rebuilding its
HNSW indexes first), since the dead rows of a large run would slow the next run's writes and
scans.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.management.base import CommandError
from django.db import ProgrammingError, connection
from django.utils.text import slugify

from knowledge.models import Document, KnowledgeBase
from retrieval.vector.upkeep import tidy_chunk_table
from tenancy.models import Tenant


@contextmanager
def throwaway_tenants(label: str, count: int = 1, *, keep: bool = False) -> Iterator[list[Tenant]]:
    """``count`` new tenants named ``bench <label> <tag>``; removed on exit unless ``keep``."""
    tag = uuid.uuid4().hex[:10]
    slug = slugify(label)
    tenants: list[Tenant] = []
    try:
        for i in range(count):
            suffix = f" {i}" if i else ""
            tenants.append(
                Tenant.objects.create(
                    name=f"bench {label} {tag}{suffix}",
                    slug=f"bench-{slug}-{tag}{suffix.replace(' ', '-')}",
                )
            )
    except ProgrammingError as exc:
        raise CommandError(f"the database is not ready ({exc}); run manage.py migrate") from exc
    try:
        yield tenants
    finally:
        if not keep:
            remove(tenants)


def remove(tenants: list[Tenant]) -> None:
    from retrieval.bm25store import get_store
    from retrieval.vector.matrix import get_matrix_cache

    ids = [t.pk for t in tenants]
    store, matrices = get_store(), get_matrix_cache()
    for kb_id in KnowledgeBase.objects.filter(tenant_id__in=ids).values_list("pk", flat=True):
        store.invalidate(kb_id)
        matrices.discard(kb_id)
    for document in Document.objects.filter(tenant_id__in=ids).exclude(file=""):
        document.file.storage.delete(document.file.name)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM knowledge_chunk WHERE tenant_id = ANY(%s)", [ids])
        deleted = cursor.rowcount
    for tenant in tenants:
        tenant.delete()
    if not connection.in_atomic_block:
        # Leave the data directory as it was: after a large run the HNSW indexes are rebuilt
        # and the table vacuumed (retrieval.vector.upkeep), so no dead row or dead graph entry
        # is left for the next run; a small run only needs the VACUUM.
        if deleted >= settings.RAG_VACUUM_MIN_DEAD_ROWS:
            tidy_chunk_table(force=True)
        else:
            with connection.cursor() as cursor:
                cursor.execute("VACUUM knowledge_chunk")
