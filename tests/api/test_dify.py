"""Dify's External Knowledge API (docs.dify.ai, "External Knowledge API"): the published
request, the ``records`` answer, and Dify's error codes with their HTTP statuses."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from knowledge.models import Document
from retrieval.api.dify_conditions import UnsupportedCondition, filters_from_condition
from tenancy.models import ApiKey
from tests.api.conftest import API, bearer, make_kb
from tests.factories import add_document

URL = f"{API}/dify/retrieval"


def body(kb_id, query="pump seal", top_k=3, score_threshold=0.0, **extra):
    return {
        "knowledge_id": str(kb_id),
        "query": query,
        "retrieval_setting": {"top_k": top_k, "score_threshold": score_threshold},
        **extra,
    }


def dify_error(response, status, code):
    assert response.status_code == status, response.content
    payload = response.json()
    assert set(payload) == {"error_code", "error_msg"}, payload
    assert payload["error_code"] == code and payload["error_msg"]
    return payload["error_msg"]


@pytest.fixture
def dify(tenant, make_key):
    return bearer(make_key(tenant, scopes=["read"]))


@pytest.mark.django_db
def test_the_published_example_request_answers_records(dify, kb):
    response = dify.post(URL, body(kb.pk, "What is the P-100 pump?", 2, 0.5), format="json")
    assert response.status_code == 200
    payload = response.json()
    assert set(payload) == {"records"}
    records = payload["records"]
    assert 1 <= len(records) <= 2
    for record in records:
        assert set(record) == {"content", "score", "title", "metadata"}
        assert isinstance(record["content"], str) and isinstance(record["title"], str)
        assert 0.5 <= record["score"] <= 1.0
        assert isinstance(record["metadata"], dict)  # never null: Dify breaks on null
    assert records[0]["title"] == "Pump handbook"
    assert records[0]["metadata"]["document_id"] == kb.docs["pumps.md"].pk
    assert records[0]["metadata"]["original_filename"] == "pumps.md"
    # score is the relevance (what Dify's threshold compares); the order stays fused.
    fused = [r["metadata"]["fused_score"] for r in records]
    assert fused == sorted(fused, reverse=True)


@pytest.mark.django_db
def test_score_threshold_zero_keeps_everything_and_top_k_limits(dify, kb):
    records = dify.post(URL, body(kb.pk, "pump", 10, 0.0), format="json").json()["records"]
    assert len(records) == 3
    one = dify.post(URL, body(kb.pk, "pump", 1, 0.0), format="json").json()["records"]
    assert len(one) == 1
    big = dify.post(URL, body(kb.pk, "pump", 10_000, 0.0), format="json")
    assert big.status_code == 200  # more than RAG_MAX_TOP_K: capped, not refused


@pytest.mark.django_db
def test_no_match_answers_an_empty_list(dify, kb):
    response = dify.post(URL, body(kb.pk, "zyxwvut", 3, 0.99), format="json")
    assert response.status_code == 200 and response.json() == {"records": []}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", [None, "Basic dXNlcjpwYXNz", "Bearer", "Token abc", "Bearer a b"]
)
def test_1001_invalid_authorization_header_is_403(kb, header):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    message = dify_error(client.post(URL, body(kb.pk), format="json"), 403, 1001)
    assert "Bearer" in message


@pytest.mark.django_db
def test_1002_authorization_failed_is_403(tenant, make_key, kb):
    dify_error(bearer("rag_12345678_nope").post(URL, body(kb.pk), format="json"), 403, 1002)

    raw = make_key(tenant, scopes=["read"], name="revoked")
    ApiKey.objects.filter(name="revoked").update(revoked_at=datetime.now(UTC))
    dify_error(bearer(raw).post(URL, body(kb.pk), format="json"), 403, 1002)

    write_only = bearer(make_key(tenant, scopes=["write"]))
    message = dify_error(write_only.post(URL, body(kb.pk), format="json"), 403, 1002)
    assert "read" in message


@pytest.mark.django_db
def test_2001_knowledge_does_not_exist_is_404(tenant, other_tenant, make_key, dify, kb):
    theirs = make_kb(other_tenant, "Theirs", {"t.md": "# Theirs\n\npump"})
    restricted = bearer(make_key(tenant, scopes=["read"], kbs=[make_kb(tenant, "Only")]))
    for client, knowledge_id in [
        (dify, 10**17),
        (dify, "AAA-BBB-CCC"),
        (dify, "²"),
        (dify, theirs.pk),  # another tenant's
        (restricted, kb.pk),  # not allowed to this key
    ]:
        dify_error(client.post(URL, body(knowledge_id), format="json"), 404, 2001)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    [
        {"query": "pump", "retrieval_setting": {"top_k": 3, "score_threshold": 0.5}},
        {"knowledge_id": "1", "retrieval_setting": {"top_k": 3, "score_threshold": 0.5}},
        {"knowledge_id": "1", "query": "pump"},
        {"knowledge_id": "1", "query": "pump", "retrieval_setting": {"top_k": 0}},
    ],
)
def test_invalid_requests_answer_400_with_a_dify_error(dify, payload):
    dify_error(dify.post(URL, payload, format="json"), 400, 3001)


@pytest.fixture
def tagged(tenant):
    kb = make_kb(tenant, "Tagged")
    kb.ai = add_document(kb, "ai.txt", "Notes on pumps and AI.", metadata={"category": "AI"})
    kb.ops = add_document(kb, "ops.txt", "Notes on pumps and ops.", metadata={"category": "ops"})
    kb.hr = add_document(kb, "hr.txt", "Notes on pumps and HR.", metadata={"category": "hr"})
    return kb


def titles(client, kb, condition):
    response = client.post(
        URL, body(kb.pk, "notes on pumps", 10, 0.0, metadata_condition=condition), format="json"
    )
    assert response.status_code == 200, response.content
    return sorted(r["title"] for r in response.json()["records"])


@pytest.mark.django_db
def test_metadata_condition_filters_records(dify, tagged):
    def cond(*conditions, logical="and"):
        return {"logical_operator": logical, "conditions": list(conditions)}

    assert titles(
        dify, tagged, cond({"name": "category", "comparison_operator": "is", "value": "AI"})
    ) == ["ai"]
    # Dify's older contract: name is a list
    assert titles(
        dify, tagged, cond({"name": ["category"], "comparison_operator": "is", "value": "ops"})
    ) == ["ops"]
    assert titles(
        dify, tagged, cond({"name": "category", "comparison_operator": "in", "value": ["AI", "hr"]})
    ) == ["ai", "hr"]
    assert titles(
        dify,
        tagged,
        cond(
            {"name": "category", "comparison_operator": "is", "value": "AI"},
            {"name": "category", "comparison_operator": "is", "value": "hr"},
            logical="or",
        ),
    ) == ["ai", "hr"]
    assert titles(
        dify,
        tagged,
        cond(
            {"name": "category", "comparison_operator": "in", "value": ["AI", "hr"]},
            {"name": "category", "comparison_operator": "is", "value": "hr"},
        ),
    ) == ["hr"]
    assert titles(dify, tagged, None) == ["ai", "hr", "ops"]


@pytest.mark.django_db
def test_metadata_condition_on_upload_date(dify, tagged):
    Document.objects.filter(pk=tagged.hr.pk).update(
        created_at=datetime.now(UTC) - timedelta(days=30)
    )
    week_ago = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    after = {
        "conditions": [{"name": "upload_date", "comparison_operator": "after", "value": week_ago}]
    }
    assert titles(dify, tagged, after) == ["ai", "ops"]
    before = {
        "conditions": [{"name": "upload_date", "comparison_operator": "before", "value": week_ago}]
    }
    assert titles(dify, tagged, before) == ["hr"]


@pytest.mark.django_db
def test_unsupported_metadata_conditions_answer_400_3002(dify, tagged):
    condition = {
        "conditions": [{"name": "category", "comparison_operator": "contains", "value": "A"}]
    }
    response = dify.post(URL, body(tagged.pk, metadata_condition=condition), format="json")
    message = dify_error(response, 400, 3002)
    assert "'contains'" in message and "is, =, in" in message


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-1e999", "9" * 400])
def test_a_number_that_is_not_finite_answers_400_3002_naming_the_condition(dify, tagged, value):
    condition = {
        "conditions": [
            {"name": "category", "comparison_operator": "is", "value": "AI"},
            {"name": "n", "comparison_operator": "=", "value": value},
        ]
    }
    response = dify.post(URL, body(tagged.pk, metadata_condition=condition), format="json")
    message = dify_error(response, 400, 3002)
    assert message.startswith("Unsupported metadata_condition: conditions.1: '=' compares finite")


@pytest.mark.django_db
@pytest.mark.parametrize("operator", ["after", "before"])
@pytest.mark.parametrize("seconds", [1e20, -1e20, 10**20, -(10**20)])
def test_unix_seconds_beyond_the_calendar_answer_400_3002_naming_the_condition(
    dify, tagged, operator, seconds
):
    condition = {
        "conditions": [{"name": "upload_date", "comparison_operator": operator, "value": seconds}]
    }
    response = dify.post(URL, body(tagged.pk, metadata_condition=condition), format="json")
    message = dify_error(response, 400, 3002)
    assert "conditions.0: Unix seconds from the year 1 to 9999" in message


@pytest.mark.django_db
def test_a_json_number_beyond_a_float_answers_400_3001_naming_the_field(dify, tagged):
    condition = {"conditions": [{"name": "n", "comparison_operator": "=", "value": 123.25}]}
    text = json.dumps(body(tagged.pk, metadata_condition=condition)).replace("123.25", "1e999")
    response = dify.post(URL, text, content_type="application/json")
    message = dify_error(response, 400, 3001)
    assert message == (
        "Invalid request: metadata_condition.conditions.0.value: A finite number is required."
    )


# ------------------------------------------------------------------ pure mapping


def test_condition_mapping():
    assert filters_from_condition(None).active is False
    f = filters_from_condition(
        {
            "conditions": [
                {"name": "n", "comparison_operator": "=", "value": "5"},
                {"name": "lang", "comparison_operator": "in", "value": "en, de"},
                {"name": "created_at", "comparison_operator": "after", "value": 0},
            ]
        }
    )
    assert f.metadata == {"n": 5, "lang": ["en", "de"]}
    assert f.created_after == datetime(1970, 1, 1, tzinfo=UTC)
    contradiction = filters_from_condition(
        {
            "conditions": [
                {"name": "c", "comparison_operator": "is", "value": "a"},
                {"name": "c", "comparison_operator": "is", "value": "b"},
            ]
        }
    )
    assert contradiction.metadata == {"c": []}  # nothing can match both


@pytest.mark.parametrize(
    "condition",
    [
        {"conditions": [{"name": "c", "comparison_operator": "empty"}]},
        {"conditions": [{"name": "c", "comparison_operator": "≥", "value": 3}]},
        {"conditions": [{"name": "c", "comparison_operator": "is", "value": ["a", "b"]}]},
        {"conditions": [{"name": "c", "comparison_operator": "=", "value": "five"}]},
        {"conditions": [{"name": "title", "comparison_operator": "before", "value": "2024-01-01"}]},
        {"conditions": [{"name": "upload_date", "comparison_operator": "after", "value": "soon"}]},
        {"conditions": [{"name": "", "comparison_operator": "is", "value": "a"}]},
        {"conditions": [{"name": "n", "comparison_operator": "=", "value": "nan"}]},
        {"conditions": [{"name": "n", "comparison_operator": "=", "value": "1e999"}]},
        {"conditions": [{"name": "created_at", "comparison_operator": "after", "value": 1e20}]},
        {"conditions": [{"name": "created_at", "comparison_operator": "before", "value": -1e20}]},
        {
            "logical_operator": "or",
            "conditions": [
                {"name": "a", "comparison_operator": "is", "value": "1"},
                {"name": "b", "comparison_operator": "is", "value": "2"},
            ],
        },
    ],
)
def test_unsupported_conditions_are_refused_with_a_reason(condition):
    with pytest.raises(UnsupportedCondition):
        filters_from_condition(condition)
