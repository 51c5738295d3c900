"""Web sources against a real local site: a 200-page help centre with a sitemap becomes 200
ready documents; a re-sync after 5 pages changed re-processes exactly those 5; pages that
disappear go; robots.txt and every limit (pages, depth, bytes per page and in total, time)
are obeyed. Processing runs in this process here (tests/web/test_worker.py uses a worker)."""

from __future__ import annotations

import pytest

from knowledge.models import Document, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from knowledge.web.models import WebPage, WebSource
from knowledge.web.sources import create_web_source
from knowledge.web.sync import sync_web_source
from retrieval.search.service import RAGService
from tests.builders import build_pdf
from tests.web_site import Page, Site, help_centre, sitemap

pytestmark = pytest.mark.django_db


@pytest.fixture
def site():
    with Site() as running:
        yield running


@pytest.fixture
def kb(tenant) -> KnowledgeBase:
    return create_knowledge_base(tenant=tenant, name="Help centre")


def process_pending(kb: KnowledgeBase) -> int:
    """Process every pending document of the knowledge base here; how many there were."""
    pending = list(
        Document.objects.filter(knowledge_base=kb, status=Document.Status.PENDING).values_list(
            "pk", flat=True
        )
    )
    for document_id in pending:
        process_document(document_id)
    return len(pending)


def source_of(kb, site, sync=False, **limits) -> WebSource:
    return create_web_source(
        tenant=kb.tenant, knowledge_base=kb, start_url=site.url("/help/"), sync=sync, **limits
    )


def synced(source: WebSource) -> WebSource:
    assert sync_web_source(source.pk) == WebSource.SyncStatus.DONE
    source.refresh_from_db()
    return source


def test_a_200_page_site_becomes_ready_and_a_resync_reprocesses_exactly_the_changed(
    kb, site, local
):
    paths = help_centre(site, 200, pdfs=(10, 100, 190))
    source = synced(source_of(kb, site))
    assert source.progress["found"] == 200 and source.progress["new"] == 200
    assert source.progress["failed"] == 0 and source.progress["stopped"] == ""
    assert process_pending(kb) == 200
    documents = Document.objects.filter(knowledge_base=kb)
    assert documents.filter(status=Document.Status.READY).count() == 200
    assert documents.filter(file_type="pdf").count() == 3
    assert set(documents.values_list("source_url", flat=True)) == {site.url(p) for p in paths}
    before = dict(documents.values_list("source_url", "processed_at"))

    changed = [paths[i] for i in (0, 37, 100, 150, 199)]  # 100 is a PDF
    for path in changed:
        if path.endswith(".pdf"):
            site.change(path, build_pdf([["Revised manual: torque is now 55 newton metres."]]))
        else:
            site.html(path, "Revised", f"Revised article {path}: use the blue cable.")
            site.pages[path].version = 2
    requests_before = len(site.requests)
    source = synced(source)
    assert source.progress["changed"] == 5 and source.progress["unchanged"] == 195
    assert source.progress["new"] == 0 and source.progress["removed"] == 0
    conditional = [r for r in site.requests[requests_before:] if "If-None-Match" in r["headers"]]
    assert len(conditional) == 200  # every known page was asked with its ETag
    assert process_pending(kb) == 5
    after = dict(documents.values_list("source_url", "processed_at"))
    reprocessed = {url for url in after if after[url] != before[url]}
    assert reprocessed == {site.url(p) for p in changed}
    assert documents.filter(status=Document.Status.READY).count() == 200

    hits = RAGService(kb.tenant).search("blue cable", kb.pk, top_k=5).hits
    assert hits and hits[0].document_id in {
        d.pk for d in documents.filter(source_url__in=[site.url(p) for p in changed])
    }


def test_pages_that_disappear_go_and_new_pages_come(kb, site, local):
    paths = help_centre(site, 6)
    synced(source_of(kb, site))
    process_pending(kb)
    gone, dropped = paths[0], paths[1]
    del site.pages[gone]  # 404 now
    site.html("/help/new-article", "New article", "Brand new troubleshooting guide.")
    listed = [p for p in paths if p not in (gone, dropped)] + ["/help/new-article"]
    site.pages["/sitemap.xml"] = Page(body=sitemap([site.url(p) for p in [*listed, gone]]))
    source = synced(WebSource.objects.get(knowledge_base=kb))
    assert source.progress["removed"] == 2 and source.progress["new"] == 1
    urls = set(Document.objects.filter(knowledge_base=kb).values_list("source_url", flat=True))
    assert urls == {site.url(p) for p in listed}
    assert set(WebPage.objects.filter(source=source).values_list("url", flat=True)) == urls


def test_robots_txt_disallow_rules_are_obeyed(kb, site, local):
    paths = help_centre(site, 3)
    site.html("/private/salaries", "Salaries", "Confidential.")
    site.pages["/sitemap.xml"] = Page(
        body=sitemap([site.url(p) for p in [*paths, "/private/salaries"]])
    )
    source = create_web_source(
        tenant=kb.tenant, knowledge_base=kb, start_url=site.url("/"), sync=False
    )
    synced(source)
    assert site.fetched("/private/salaries") == []
    assert Document.objects.filter(knowledge_base=kb).count() == 3


def test_robots_txt_is_obeyed_for_the_start_page_too(kb, site, local):
    site.html("/help/", "Help", "Start here.", ("/help/a",))
    site.html("/help/a", "A", "Words.")
    site.pages["/robots.txt"] = Page(body=b"User-agent: *\nDisallow: /help/\n")
    source = synced(source_of(kb, site))
    assert site.fetched("/help/") == [] and site.fetched("/help/a") == []
    assert source.progress["fetched"] == 0 and not Document.objects.exists()


def test_without_a_sitemap_links_are_followed_breadth_first_to_the_max_depth(kb, site, local):
    chain = ["/help/", "/help/a", "/help/b", "/help/c", "/help/d"]
    for here, there in zip(chain, [*chain[1:], "/help/"], strict=True):
        site.html(here, f"Page {here}", f"Words of {here}.", (there, "https://elsewhere.example/"))
    site.html("/outside", "Outside", "Not under /help/.")
    site.pages["/help/a"].body += b'<a href="/outside">out</a>'
    source = synced(source_of(kb, site, max_depth=2, include_prefixes=["/help/"]))
    urls = set(Document.objects.filter(knowledge_base=kb).values_list("source_url", flat=True))
    assert urls == {site.url(p) for p in chain[:3]}  # depth 0, 1, 2
    assert site.fetched("/help/c") == [] and site.fetched("/outside") == []
    assert source.progress["stopped"] == ""


def test_the_page_limit_stops_the_sync_and_removes_nothing(kb, site, local):
    help_centre(site, 20)
    source = synced(source_of(kb, site))
    assert Document.objects.filter(knowledge_base=kb).count() == 20
    source.max_pages = 5
    source.save()
    site.pages["/sitemap.xml"] = Page(
        body=sitemap([site.url(f"/help/article-{i}") for i in range(30)])
    )
    source = synced(source)
    assert source.progress["stopped"] == "max pages (5) reached"
    assert source.progress["found"] == 30 and source.progress["fetched"] == 5
    assert Document.objects.filter(knowledge_base=kb).count() == 20  # a cut sync removes none


def test_a_page_over_the_byte_cap_fails_alone(kb, site, local):
    help_centre(site, 4)
    site.pages["/help/article-2"] = Page(body=b"<p>" + b"x" * 5000 + b"</p>")
    source = synced(source_of(kb, site, max_page_bytes=2048))
    assert source.progress["failed"] == 1 and source.progress["new"] == 3
    page = WebPage.objects.get(source=source, url=site.url("/help/article-2"))
    assert "larger than the limit of 2,048 bytes" in page.error


def test_the_total_byte_cap_stops_the_sync(kb, site, local):
    help_centre(site, 10)
    size = len(site.pages["/help/article-0"].body)
    source = synced(source_of(kb, site, max_total_bytes=max(1024, size * 3)))
    assert source.progress["stopped"].startswith("max total bytes")
    assert source.progress["fetched"] < 10


def test_the_time_budget_stops_the_sync(kb, site, local):
    help_centre(site, 5)
    site.pages["/help/article-2"].held = True  # answers only when the test ends
    source = synced(source_of(kb, site, time_budget_s=1))
    assert source.progress["stopped"] == "time budget (1 s) used up"
    # Nothing after the page that never answered was asked for, and it was not stored.
    assert source.progress["new"] <= 2
    assert site.fetched("/help/article-3") == [] and site.fetched("/help/article-4") == []
    assert not WebPage.objects.filter(url=site.url("/help/article-2"), document__isnull=False)
