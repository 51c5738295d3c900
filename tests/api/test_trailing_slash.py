"""Every API route answers the same with or without a trailing slash (no redirect: a POST body
survives), and the schema lists each path once, without it."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.api.conftest import API

pytestmark = pytest.mark.django_db


def api_routes() -> list[str]:
    """Every route under /api/v1/ as a path template, ``{id}`` for its ids."""
    routes: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            text = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, text)
            elif (
                isinstance(pattern, URLPattern)
                and text.startswith("api/v1/")
                and pattern.name not in (None, "api-fallback", "api-schema")
            ):
                routes.append("/" + re.sub(r"<id:\w+>", "{id}", text))

    walk(get_resolver().url_patterns, "")
    return routes


def test_every_route_answers_the_same_with_a_trailing_slash(client, kb):
    document = next(iter(kb.docs.values()))
    chunk = document.chunks.first()
    ids = {"knowledge-bases": kb.pk, "documents": document.pk, "chunks": chunk.pk}
    routes = api_routes()
    assert len(routes) >= 12
    for route in routes:
        kind = route.split("/")[3]
        url = route.replace("{id}", str(ids.get(kind, 1)))
        plain, slashed = client.get(url), client.get(url + "/")
        assert slashed.status_code == plain.status_code, url
        if plain.status_code == 200 and "json" in plain.get("Content-Type", ""):
            assert slashed.json().keys() == plain.json().keys(), url


def test_a_post_keeps_its_body_through_the_slash(client, kb):
    body = {"query": "pump seal", "top_k": 2}
    plain = client.post(f"{API}/knowledge-bases/{kb.pk}/search", body, format="json")
    slashed = client.post(f"{API}/knowledge-bases/{kb.pk}/search/", body, format="json")
    assert slashed.status_code == plain.status_code == 200
    hits = [hit["chunk_id"] for hit in slashed.json()["results"]]
    assert hits == [hit["chunk_id"] for hit in plain.json()["results"]]


def test_unknown_paths_still_answer_404_in_the_error_shape(client):
    response = client.get(f"{API}/nothing-here/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_the_schema_lists_each_path_once_without_the_slash(client):
    paths = client.get(f"{API}/schema/", {"format": "json"}).json()["paths"]
    assert f"{API}/knowledge-bases" in paths
    assert not [path for path in paths if path.endswith("/")]
