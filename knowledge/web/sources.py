"""Web sources: create, change, delete, and sync (now, or when their interval has passed).

Every service takes the tenant. A source's start and sitemap URLs are checked like a
document's URL before anything is stored (http(s), no address that is not public unless
allow-listed). Deleting a source deletes the documents its pages became: the site leaves the
knowledge base with it.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from knowledge.models import KnowledgeBase
from knowledge.services.documents import delete_document
from knowledge.web.documents import canonical_url
from knowledge.web.models import WebSource
from rag_project.celery import enqueue
from tenancy.errors import DomainError, ErrorKind, ensure_tenant
from tenancy.models import Tenant

EDITABLE_FIELDS = (
    "name",
    "start_url",
    "sitemap_url",
    "include_prefixes",
    "exclude_prefixes",
    "follow_links",
    "max_pages",
    "max_depth",
    "max_page_bytes",
    "max_total_bytes",
    "time_budget_s",
    "sync_interval_s",
)


class InvalidWebSource(DomainError):
    code = "invalid_web_source"
    kind = ErrorKind.INVALID


def _validated(source: WebSource) -> None:
    try:
        source.full_clean()
    except ValidationError as exc:
        messages = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        raise InvalidWebSource(messages, fields=exc.message_dict) from None


def _checked(fields: dict) -> dict:
    fields = dict(fields)
    for name in ("start_url", "sitemap_url"):
        if fields.get(name):
            fields[name] = canonical_url(fields[name])
    return fields


def create_web_source(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, sync: bool = True, **fields
) -> WebSource:
    """A new source of the knowledge base; its first sync is queued (on commit) unless
    ``sync=False``."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"not web source fields: {sorted(unknown)}")
    source = WebSource(tenant=tenant, knowledge_base=knowledge_base, **_checked(fields))
    _validated(source)
    with transaction.atomic():
        source.save()
        if sync:
            request_sync(tenant=tenant, source=source)
    return source


def update_web_source(*, tenant: Tenant, source: WebSource, **fields) -> WebSource:
    """Change a source's settings; they apply from its next sync."""
    ensure_tenant(source, tenant, "web source")
    for name, value in _checked(fields).items():
        if name not in EDITABLE_FIELDS:
            raise TypeError(f"{name} is not a web source field")
        setattr(source, name, value)
    _validated(source)
    source.save()
    return source


def delete_web_source(*, tenant: Tenant, source: WebSource) -> int:
    """Delete the source, its pages and their documents; returns how many documents went."""
    ensure_tenant(source, tenant, "web source")
    with transaction.atomic():
        documents = [p.document for p in source.pages.select_related("document") if p.document]
        for document in documents:
            delete_document(tenant=tenant, document=document)
        source.delete()
    return len(documents)


def request_sync(*, tenant: Tenant, source: WebSource) -> None:
    """Queue a sync of the source (on commit); a sync already running finishes first (the
    second one finds it running and returns)."""
    ensure_tenant(source, tenant, "web source")
    now = timezone.now()
    WebSource.objects.filter(pk=source.pk).exclude(sync_status=WebSource.SyncStatus.RUNNING).update(
        sync_status=WebSource.SyncStatus.QUEUED, sync_requested_at=now, updated_at=now
    )
    source.refresh_from_db()
    _queue(source.pk)


def _queue(source_id: int) -> None:
    enqueue("knowledge.sync_web_source", source_id)


def queue_due_syncs(now=None) -> list[int]:
    """Queue every source whose interval has passed since its last sync started, and every
    sync whose task was lost (queued, or running, for longer than it could take): beat calls
    this every minute."""
    now = now or timezone.now()
    stuck = now - timedelta(seconds=settings.RAG_STUCK_AFTER_S)
    statuses = WebSource.SyncStatus
    queued = []
    candidates = WebSource.objects.filter(
        Q(sync_interval_s__gt=0) | Q(sync_status=statuses.QUEUED) | Q(sync_status=statuses.RUNNING)
    )
    for source in candidates:
        if source.sync_status == statuses.QUEUED:
            due = source.sync_requested_at is None or source.sync_requested_at < stuck
        elif source.sync_status == statuses.RUNNING:
            limit = timedelta(seconds=source.time_budget_s + settings.RAG_STUCK_AFTER_S)
            due = source.last_sync_started_at is None or source.last_sync_started_at < now - limit
        else:
            # A source stored before the minimum (or under a lower one) syncs at the minimum.
            interval = max(source.sync_interval_s, settings.RAG_WEB_MIN_SYNC_INTERVAL_S)
            last = source.last_sync_started_at
            due = last is None or last + timedelta(seconds=interval) <= now
        if due:
            WebSource.objects.filter(pk=source.pk).update(
                sync_status=statuses.QUEUED, sync_requested_at=now, updated_at=now
            )
            _queue(source.pk)
            queued.append(source.pk)
    return queued
