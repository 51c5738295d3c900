"""The search and context views send ``present``'s body as it is, not through the response
serializers (which would rebuild an equal dict on every request): these check, over real
searches of every shape, that the body is exactly what the serializers that document it
render."""

from __future__ import annotations

import json

import pytest

from retrieval.api.serializers import ContextResponseSerializer, SearchResponseSerializer
from tests.api.conftest import API, MANUALS, make_kb

pytestmark = pytest.mark.django_db


def canonical(body) -> str:
    return json.dumps(body, sort_keys=True)


CASES = [
    ("knowledge-bases/{kb}/search", {"query": "pump seal"}),
    ("knowledge-bases/{kb}/search", {"query": "pump seal", "explain": True}),
    ("knowledge-bases/{kb}/search", {"query": "温度传感器 calibration", "mode": "keyword"}),
    ("knowledge-bases/{kb}/search", {"query": "sensor", "mode": "vector", "top_k": 1}),
    ("knowledge-bases/{kb}/search", {"query": "nothing like it zzzq", "score_threshold": 0.99}),
    (
        "knowledge-bases/{kb}/search",
        {"query": "pump", "filters": {"metadata": {"lang": "en"}}, "explain": True},
    ),
    ("search", {"query": "pump seal", "knowledge_base_ids": ["{kb}", "{other}"]}),
    ("search", {"query": "sensor", "knowledge_base_ids": ["{kb}", "{other}"], "explain": True}),
    ("knowledge-bases/{kb}/context", {"query": "pump seal"}),
    ("context", {"query": "sensor", "knowledge_base_ids": ["{kb}", "{other}"], "explain": True}),
]


@pytest.mark.parametrize(("path", "body"), CASES)
def test_the_body_sent_is_what_the_documented_serializer_renders(client, tenant, path, body):
    kb = make_kb(tenant, documents=MANUALS)
    other = make_kb(tenant, name="Other", documents={"o.md": "# Other\n\nA pump and a sensor."})
    ids = {"kb": kb.pk, "other": other.pk}
    url = f"{API}/{path.format(**ids)}"
    if "knowledge_base_ids" in body:
        body = {
            **body,
            "knowledge_base_ids": [int(i.format(**ids)) for i in body["knowledge_base_ids"]],
        }

    response = client.post(url, body, format="json")

    assert response.status_code == 200, response.content
    sent = response.json()
    serializer = ContextResponseSerializer if "context" in sent else SearchResponseSerializer
    assert canonical(sent) == canonical(serializer(sent).data)
    if body.get("query") == "pump seal" and not body.get("explain"):
        assert sent["results"]  # the cases cover hits, not only empty answers
