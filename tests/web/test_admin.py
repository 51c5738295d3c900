"""The admin's web parts: URLs on the upload page, and the web sources page (add, refuse a
non-public start URL on the form, sync now, progress), scoped to the user's tenants."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from knowledge.models import Document
from knowledge.services.processing import process_document
from knowledge.web.documents import fetch_into
from knowledge.web.models import WebSource
from knowledge.web.sync import sync_web_source
from tests.admin.conftest import world  # noqa: F401  (the fixture)
from tests.web_site import Site, help_centre

pytestmark = pytest.mark.django_db


@pytest.fixture
def site():
    with Site() as running:
        help_centre(running, 3)
        yield running


@pytest.fixture
def owner(client, world):  # noqa: F811
    client.force_login(world.owner_a)
    return client


def test_the_upload_page_takes_urls(owner, world, site, local):  # noqa: F811
    kb = world.kb_a
    url = reverse("admin:knowledge_knowledgebase_upload", args=[kb.pk])
    assert 'name="urls"' in owner.get(url).content.decode()
    article = site.url("/help/article-1")
    page = owner.post(url, {"urls": f"{article}\n\nhttp://169.254.169.254/latest/"})
    page = page.content.decode()
    assert rows(page) == {article: "refused", "http://169.254.169.254/latest/": "refused"}
    assert "link-local address" in page and "Nothing was stored: 1 of the 2 files" in page
    assert not Document.objects.filter(knowledge_base=kb, source_url=article).exists()

    page = owner.post(url, {"urls": article}).content.decode()
    assert rows(page) == {article: "accepted"}
    document = Document.objects.get(knowledge_base=kb, source_url=article)
    assert process_document(document.pk, fetch=fetch_into) == Document.Status.READY


def rows(page: str) -> dict[str, str]:
    """Each row of the upload's results: file or URL, and its outcome."""
    return dict(
        re.findall(
            r'data-file="([^"]+)">\s*<td>[^<]*</td>\s*<td><span class="kb-badge kb-(\w+)"', page
        )
    )


def test_an_empty_upload_says_what_to_give(owner, world):  # noqa: F811
    url = reverse("admin:knowledge_knowledgebase_upload", args=[world.kb_a.pk])
    page = owner.post(url, {"urls": ""}).content.decode()
    assert "Choose or drop at least one file or a folder, or give a URL." in page


def test_add_a_web_source_sync_it_and_see_its_progress(owner, world, site, local):  # noqa: F811
    add = reverse("admin:knowledge_websource_add")
    fields = {
        "knowledge_base": world.kb_a.pk,
        "name": "Help centre",
        "start_url": site.url("/help/"),
        "sitemap_url": "",
        "include_prefixes": "",
        "exclude_prefixes": "",
        "follow_links": "on",
        "max_pages": 100,
        "max_depth": 3,
        "max_page_bytes": 1_000_000,
        "max_total_bytes": 10_000_000,
        "time_budget_s": 600,
        "sync_interval_s": 3600,
    }
    refused = owner.post(add, {**fields, "start_url": "http://169.254.169.254/"})
    assert refused.status_code == 200 and "link-local address" in refused.content.decode()
    every_second = owner.post(add, {**fields, "sync_interval_s": 1})
    assert every_second.status_code == 200
    assert "0 (sync only when asked) or at least 3600 seconds" in every_second.content.decode()
    assert not WebSource.objects.exists()

    response = owner.post(add, fields)
    assert response.status_code == 302, response.content.decode()[:2000]
    source = WebSource.objects.get()
    assert source.tenant == world.tenant_a and source.sync_status == "queued"
    sync_web_source(source.pk)
    listing = owner.get(reverse("admin:knowledge_websource_changelist")).content.decode()
    assert "3 found" in listing and "3 new" in listing and "Done" in listing

    changelist = reverse("admin:knowledge_websource_changelist")
    owner.post(changelist, {"action": "sync_now", "_selected_action": [source.pk]})
    source.refresh_from_db()
    assert source.sync_status == "queued"


def test_another_tenants_sources_are_not_shown(client, world):  # noqa: F811
    theirs = WebSource.objects.create(
        tenant=world.tenant_b, knowledge_base=world.kb_b, start_url="https://bolt.example/"
    )
    client.force_login(world.owner_a)
    assert (
        "bolt.example"
        not in client.get(reverse("admin:knowledge_websource_changelist")).content.decode()
    )
    change = reverse("admin:knowledge_websource_change", args=[theirs.pk])
    assert client.get(change).status_code == 404
    client.post(
        reverse("admin:knowledge_websource_changelist"),
        {"action": "sync_now", "_selected_action": [theirs.pk]},
    )
    theirs.refresh_from_db()
    assert theirs.sync_status == "idle"
