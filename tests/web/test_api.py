"""The web-source endpoints: create (201, first sync queued), list, retrieve with progress,
change, sync now (202), delete with the documents; the role table (editors write, viewers
read); tenant isolation; refused start URLs (400)."""

from __future__ import annotations

import pytest

from knowledge.models import Document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.web.models import WebSource
from knowledge.web.sync import sync_web_source
from tenancy.models import Membership
from tests.conftest import API, bearer, error_of, signed_in
from tests.web_site import Site, help_centre

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(tenant):
    return create_knowledge_base(tenant=tenant, name="Help")


@pytest.fixture
def site():
    with Site() as running:
        help_centre(running, 4)
        yield running


def create(client, kb, **body):
    return client.post(f"{API}/knowledge-bases/{kb.pk}/web-sources", body, format="json")


def test_create_sync_and_follow_progress(client, kb, site, local):
    response = create(client, kb, start_url=site.url("/help/"), max_pages=50, sync_interval_s=0)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["sync_status"] == "queued" and body["progress"] is None
    assert body["max_pages"] == 50 and body["knowledge_base_id"] == kb.pk

    sync_web_source(body["id"])  # what the queued task runs
    source = client.get(f"{API}/web-sources/{body['id']}").json()
    assert source["sync_status"] == "done" and source["page_count"] == 4
    assert source["progress"]["found"] == 4 and source["progress"]["new"] == 4
    assert client.get(f"{API}/knowledge-bases/{kb.pk}/web-sources").json()["count"] == 1

    changed = client.patch(f"{API}/web-sources/{body['id']}", {"max_depth": 1}, format="json")
    assert changed.status_code == 200 and changed.json()["max_depth"] == 1
    synced = client.post(f"{API}/web-sources/{body['id']}/sync")
    assert synced.status_code == 202 and synced.json()["sync_status"] == "queued"

    assert Document.objects.filter(knowledge_base=kb).count() == 4
    assert client.delete(f"{API}/web-sources/{body['id']}").status_code == 204
    assert not Document.objects.filter(knowledge_base=kb).exists()
    assert not WebSource.objects.exists()


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://169.254.169.254/", "url_refused"),
        ("http://10.0.0.8/wiki/", "url_refused"),
        ("ftp://example.com/", "url_invalid"),
    ],
)
def test_a_start_url_that_is_not_allowed_is_refused(client, kb, url, code):
    response = create(client, kb, start_url=url)
    assert response.status_code == 400
    assert error_of(response)["code"] == code
    assert not WebSource.objects.exists()


def test_limits_out_of_range_are_refused(client, kb):
    response = create(client, kb, start_url="https://help.example.com/", max_pages=0)
    assert response.status_code == 400
    assert "max_pages" in str(error_of(response))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sync_interval_s", 1),
        ("sync_interval_s", 3599),
        ("sync_interval_s", 366 * 24 * 3600),
        ("sync_interval_s", -1),
        ("sync_interval_s", 10**30),
        ("max_total_bytes", 11 * 1024**3),
        ("max_total_bytes", 10**30),
        ("max_pages", 100_001),
        ("max_depth", 51),
        ("time_budget_s", 0),
        ("time_budget_s", 6 * 3600 + 1),
        ("max_page_bytes", 1023),
    ],
)
def test_a_schedule_or_limit_out_of_bounds_is_refused_naming_the_field(
    client, kb, settings, field, value
):
    settings.RAG_WEB_MIN_SYNC_INTERVAL_S = 3600
    response = create(client, kb, start_url="https://help.example.com/", **{field: value})
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid" and error["message"].startswith(f"{field}: ")
    assert list(error["details"]["fields"]) == [field]
    assert not WebSource.objects.exists()


def test_the_sync_interval_is_0_or_at_least_the_minimum(client, kb, settings):
    settings.RAG_WEB_MIN_SYNC_INTERVAL_S = 3600
    manual = create(client, kb, start_url="https://help.example.com/", sync_interval_s=0)
    hourly = create(client, kb, start_url="https://docs.example.com/", sync_interval_s=3600)
    assert manual.status_code == 201 and hourly.status_code == 201, hourly.content
    source = hourly.json()["id"]

    response = client.patch(f"{API}/web-sources/{source}", {"sync_interval_s": 1}, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["message"] == (
        "sync_interval_s: Ensure this value is 0 (sync only when asked) or at least 3600 seconds."
    )
    assert WebSource.objects.get(pk=source).sync_interval_s == 3600  # unchanged


def test_viewers_read_and_editors_write(kb, member):
    source = WebSource.objects.create(
        tenant=kb.tenant, knowledge_base=kb, start_url="https://help.example.com/"
    )
    viewer = signed_in(member(kb.tenant, Membership.Role.VIEWER))
    assert viewer.get(f"{API}/web-sources/{source.pk}").status_code == 200
    assert create(viewer, kb, start_url="https://help.example.com/x").status_code == 403
    assert viewer.post(f"{API}/web-sources/{source.pk}/sync").status_code == 403
    assert viewer.delete(f"{API}/web-sources/{source.pk}").status_code == 403
    editor = signed_in(member(kb.tenant, Membership.Role.EDITOR))
    assert editor.post(f"{API}/web-sources/{source.pk}/sync").status_code == 202


def test_another_tenants_source_is_missing(kb, other_tenant, make_key):
    source = WebSource.objects.create(
        tenant=kb.tenant, knowledge_base=kb, start_url="https://help.example.com/"
    )
    stranger = bearer(make_key(other_tenant))
    for method, path in [
        ("get", f"web-sources/{source.pk}"),
        ("patch", f"web-sources/{source.pk}"),
        ("delete", f"web-sources/{source.pk}"),
        ("post", f"web-sources/{source.pk}/sync"),
        ("get", f"knowledge-bases/{kb.pk}/web-sources"),
        ("post", f"knowledge-bases/{kb.pk}/web-sources"),
    ]:
        response = getattr(stranger, method)(f"{API}/{path}", {}, format="json")
        assert response.status_code == 404, (method, path, response.status_code)
    assert WebSource.objects.get(pk=source.pk).sync_status == WebSource.SyncStatus.IDLE


def test_a_key_restricted_to_another_knowledge_base_does_not_see_the_source(kb, tenant, make_key):
    other = create_knowledge_base(tenant=tenant, name="Other")
    source = WebSource.objects.create(
        tenant=tenant, knowledge_base=kb, start_url="https://help.example.com/"
    )
    restricted = bearer(make_key(tenant, kbs=[other]))
    assert restricted.get(f"{API}/web-sources/{source.pk}").status_code == 404
