"""Syncs on a schedule and safe to run twice: beat's check queues the sources whose interval
has passed and the syncs whose task was lost, and a second sync of a source while one runs
returns at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from knowledge.models import Document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.web.models import WebSource
from knowledge.web.sources import queue_due_syncs
from knowledge.web.sync import sync_web_source
from tests.web_site import Site, help_centre

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(tenant):
    return create_knowledge_base(tenant=tenant, name="Help")


def make(kb, **fields) -> WebSource:
    fields.setdefault("start_url", "https://help.example.com/")
    return WebSource.objects.create(tenant=kb.tenant, knowledge_base=kb, **fields)


def test_sources_are_queued_when_their_interval_has_passed(kb, settings):
    now = timezone.now()
    never = make(kb)
    due = make(kb, sync_interval_s=3600, last_sync_started_at=now - timedelta(hours=2))
    recent = make(kb, sync_interval_s=3600, last_sync_started_at=now - timedelta(minutes=5))
    manual = make(kb, sync_interval_s=0, last_sync_started_at=now - timedelta(days=9))
    lost = make(
        kb,
        sync_interval_s=0,
        sync_status=WebSource.SyncStatus.QUEUED,
        sync_requested_at=now - timedelta(seconds=settings.RAG_STUCK_AFTER_S + 1),
    )
    dead = make(
        kb,
        sync_status=WebSource.SyncStatus.RUNNING,
        time_budget_s=60,
        last_sync_started_at=now - timedelta(seconds=settings.RAG_STUCK_AFTER_S + 61),
    )
    running = make(
        kb, sync_status=WebSource.SyncStatus.RUNNING, last_sync_started_at=now, time_budget_s=60
    )
    queued = queue_due_syncs(now)
    assert set(queued) == {never.pk, due.pk, lost.pk, dead.pk}
    assert WebSource.objects.get(pk=due.pk).sync_status == WebSource.SyncStatus.QUEUED
    for untouched in (recent, manual):
        assert WebSource.objects.get(pk=untouched.pk).sync_status == WebSource.SyncStatus.IDLE
    assert WebSource.objects.get(pk=running.pk).sync_status == WebSource.SyncStatus.RUNNING


def test_a_source_stored_with_a_shorter_interval_syncs_at_the_minimum(kb, settings):
    """Rows written before the interval was bounded (or under a lower minimum) do not make
    beat re-crawl their site every minute."""
    now = timezone.now()
    settings.RAG_WEB_MIN_SYNC_INTERVAL_S = 3600
    every_second = make(kb, sync_interval_s=1, last_sync_started_at=now - timedelta(minutes=2))
    assert queue_due_syncs(now) == []
    assert queue_due_syncs(now + timedelta(minutes=59)) == [every_second.pk]


def test_a_second_sync_while_one_runs_returns_at_once(kb, local):
    with Site() as site:
        help_centre(site, 3)
        source = make(kb, start_url=site.url("/help/"))
        cache.add(f"web-sync:{source.pk}", "another worker", timeout=60)
        try:
            assert sync_web_source(source.pk) == "running elsewhere"
            assert site.requests == [] and not Document.objects.exists()
        finally:
            cache.delete(f"web-sync:{source.pk}")
        assert sync_web_source(source.pk) == WebSource.SyncStatus.DONE
        assert sync_web_source(source.pk) == WebSource.SyncStatus.DONE  # again: nothing new
        source.refresh_from_db()
        assert source.progress["unchanged"] == 3 and source.progress["new"] == 0
        assert Document.objects.filter(knowledge_base=kb).count() == 3


def test_a_missing_sitemap_given_fails_the_sync_with_its_reason(kb, local):
    with Site() as site:
        source = make(kb, start_url=site.url("/"), sitemap_url=site.url("/nope.xml"))
        assert sync_web_source(source.pk) == WebSource.SyncStatus.FAILED
        source.refresh_from_db()
        assert "the sitemap could not be read" in source.error and "HTTP 404" in source.error
