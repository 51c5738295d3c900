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
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import ProgrammingError, connection
from django.utils import timezone
from django.utils.text import slugify

from knowledge.models import Chunk, Document, KnowledgeBase
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


def add_cleanup_arguments(parser) -> None:
    parser.add_argument(
        "--older-than",
        type=float,
        default=60.0,
        help="minutes: leave younger benchmark tenants alone (a run may still hold them)",
    )


def cleanup(options: dict[str, Any]) -> dict[str, Any]:
    """Remove what interrupted (or ``--keep``) benchmark runs left: tenants whose slug starts
    with ``bench-`` created more than ``--older-than`` minutes ago. A leftover 384-d chunk keeps
    the HNSW index every later fill must then insert into row by row."""
    if options["older_than"] < 0:
        raise CommandError("--older-than must be at least 0")
    cutoff = timezone.now() - timedelta(minutes=options["older_than"])
    tenants = list(Tenant.objects.filter(slug__startswith="bench-", created_at__lt=cutoff))
    names = [t.name for t in tenants]
    chunks = Chunk.objects.filter(tenant__in=tenants).count()
    if tenants:
        remove(tenants)
    return {"removed_tenants": names, "removed_chunks": chunks}


def cleanup_table(r: dict[str, Any]) -> str:
    if not r["removed_tenants"]:
        return "no benchmark tenants left behind"
    names = "\n".join(f"  {name}" for name in r["removed_tenants"])
    count = len(r["removed_tenants"])
    return f"removed {count} tenant(s), {r['removed_chunks']:,} chunks:\n{names}"


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
