"""One error shape everywhere, including what DRF and Django answer themselves, and rate limits
per API key."""

import json

import pytest
from rest_framework.test import APIClient

from retrieval.search import RAGService
from tenancy.api.parsers import JSONRefused, loads
from tests.api.conftest import API, bearer, error_of

pytestmark = pytest.mark.django_db


def test_unknown_api_paths_and_absurd_ids_answer_404_in_the_error_shape(client):
    for path in ("nothing-here", "knowledge-bases/99999999999999999999999", "documents/x"):
        response = client.get(f"{API}/{path}")
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"


def test_pages_outside_the_api_keep_djangos_404():
    response = APIClient().get("/no-such-page")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_method_not_allowed(client, kb):
    response = client.put(f"{API}/knowledge-bases/{kb.pk}", {}, format="json")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


def test_malformed_json_and_unsupported_content_types(client, kb):
    path = f"{API}/knowledge-bases/{kb.pk}/search"
    response = client.post(path, "{not json", content_type="application/json")
    assert response.status_code == 400 and error_of(response)["code"] == "parse_error"
    response = client.post(path, "query=pump", content_type="text/plain")
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_server_errors_answer_500_in_the_error_shape(client, kb, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(RAGService, "search", explode)
    client.raise_request_exception = False
    response = client.post(f"{API}/knowledge-bases/{kb.pk}/search", {"query": "x"}, format="json")
    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == "server_error" and "boom" not in error["message"]


def test_each_key_is_throttled_on_its_own(tenant, make_key, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"api_key": "3/min", "user": "3/min"},
    }
    busy, calm = bearer(make_key(tenant)), bearer(make_key(tenant))
    assert [busy.get(f"{API}/me").status_code for _ in range(3)] == [200, 200, 200]
    response = busy.get(f"{API}/me")
    assert response.status_code == 429
    error = error_of(response)
    assert error["code"] == "throttled"
    assert 0 < error["details"]["retry_after_s"] <= 60
    assert int(response["Retry-After"]) == error["details"]["retry_after_s"]
    assert calm.get(f"{API}/me").status_code == 200


def test_unknown_api_paths_answer_json_with_debug_on_too(client, settings):
    settings.DEBUG = True
    response = client.get(f"{API}/nope")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_unknown_api_paths_answer_json_to_every_method(tenant, member):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(member(tenant))
    for method in ("post", "patch", "delete"):
        response = getattr(client, method)(f"{API}/documents/-1/reprocess")
        assert response.status_code == 404, method
        assert error_of(response)["code"] == "not_found"


@pytest.mark.parametrize(
    "text",
    ["[" * 10_000 + "]" * 10_000, '{"a":' * 10_000 + "1" + "}" * 10_000],
    ids=["arrays", "objects"],
)
def test_a_body_nested_ten_thousand_deep_answers_400(client, kb, text):
    response = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", text, content_type="application/json"
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "parse_error"
    assert error["message"] == ("JSON parse error - Arrays and objects are nested at most 64 deep.")


def test_nesting_is_read_up_to_sixty_four_deep():
    assert loads("[" * 64 + "]" * 64) == json.loads("[" * 64 + "]" * 64)
    with pytest.raises(JSONRefused, match="nested at most 64 deep"):
        loads("[" * 65 + "]" * 65)
    with pytest.raises(JSONRefused, match="nested at most 64 deep"):
        loads('{"a":' * 65 + "1" + "}" * 65)


def test_a_number_beyond_a_float_answers_400_naming_its_field(client, kb):
    text = '{"query": "pump", "filters": {"metadata": {"revs": [1, 1e999]}}}'
    response = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", text, content_type="application/json"
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["message"] == "filters.metadata.revs.1: A finite number is required."
    assert error["details"]["fields"] == {
        "filters": {"metadata": {"revs": {"1": ["A finite number is required."]}}}
    }


@pytest.mark.parametrize(
    ("path", "text", "field"),
    [
        ("knowledge-bases/{kb}/search", '{"query": "pump", "mode": "\\ud800"}', "mode"),
        ("knowledge-bases/{kb}/documents/delete", '{"status": ["\\ud800"]}', "status.0"),
    ],
)
def test_an_unpaired_surrogate_quoted_back_in_an_error_is_rendered(client, kb, path, text, field):
    """UTF-8 cannot encode the message quoting it; the answer escapes it instead."""
    response = client.post(f"{API}/{path.format(kb=kb.pk)}", text, content_type="application/json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["message"] == f'{field}: "\ud800" is not a valid choice.'
    assert b'"\\"\\ud800\\" is not a valid choice."' in response.content
