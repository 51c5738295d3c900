"""The whole web import with a real Celery worker: a help centre of 200 pages with a sitemap,
added over the API as a web source, synced and processed by the worker until every page is a
ready document; 5 pages change, "sync now", and the worker re-processes exactly those 5."""

from __future__ import annotations

import time

import pytest

from knowledge.models import Document
from knowledge.services.knowledge_bases import create_knowledge_base
from tests.conftest import API, wait_until
from tests.web_site import Site, help_centre

PAGES = 200


@pytest.mark.slow
@pytest.mark.e2e
def test_a_200_page_site_synced_by_the_worker_then_5_changed_pages_reprocessed(
    worker_factory, tenant, client, settings
):
    settings.RAG_WEB_ALLOWED_HOSTS = ["127.0.0.1"]
    worker_factory(RAG_WEB_ALLOWED_HOSTS="127.0.0.1").start()
    kb = create_knowledge_base(tenant=tenant, name="Help centre")
    with Site() as site:
        paths = help_centre(site, PAGES, pdfs=(20, 120))
        started = time.perf_counter()
        response = client.post(
            f"{API}/knowledge-bases/{kb.pk}/web-sources",
            {"start_url": site.url("/help/"), "max_pages": 1000},
            format="json",
        )
        assert response.status_code == 201, response.content
        source_url = f"{API}/web-sources/{response.json()['id']}"
        documents = Document.objects.filter(knowledge_base=kb)

        def all_ready() -> bool:
            synced = client.get(source_url).json()["sync_status"] == "done"
            return synced and documents.filter(status=Document.Status.READY).count() == PAGES

        wait_until(all_ready, f"the worker to make {PAGES} pages ready", interval=0.5)
        first_s = time.perf_counter() - started
        progress = client.get(source_url).json()["progress"]
        assert progress["new"] == PAGES and progress["failed"] == 0
        assert not documents.exclude(status=Document.Status.READY).exists()
        before = dict(documents.values_list("pk", "processed_at"))

        changed = [paths[i] for i in (3, 60, 99, 150, 198)]
        for path in changed:
            site.html(path, "Changed", f"The new procedure for {path} uses the red lever.")
            site.pages[path].version = 2
        started = time.perf_counter()
        assert client.post(f"{source_url}/sync").status_code == 202

        def resynced() -> dict | None:
            body = client.get(source_url).json()
            if body["sync_status"] != "done" or body["sync_count"] != 2:
                return None
            ready = documents.filter(status=Document.Status.READY).count() == PAGES
            return body["progress"] if ready else None

        progress = wait_until(resynced, "the re-sync and its re-processing", interval=0.5)
        second_s = time.perf_counter() - started
        assert progress["changed"] == 5 and progress["unchanged"] == PAGES - 5
        after = dict(documents.values_list("pk", "processed_at"))
        reprocessed = {pk for pk in after if after[pk] != before[pk]}
        expected = set(
            documents.filter(source_url__in=[site.url(p) for p in changed]).values_list(
                "pk", flat=True
            )
        )
        assert reprocessed == expected and len(expected) == 5
    print(
        f"\nweb import, {PAGES} pages: first sync to all ready {first_s:.1f} s; "
        f"re-sync with 5 changed to ready {second_s:.1f} s"
    )
