"""Fuzzing Dify's External Knowledge API with two tenants' keys (``tests/fuzzing.py``): request
bodies whose metadata conditions take every shape and value ("nan", "1e999", Unix seconds of
+-1e20, huge integers, NUL, unpaired surrogates, lists, objects) never get a server error, a
tenant's key never gets a record of the other tenant's, and the other tenant's knowledge base
answers as a missing one does. Prints what it sent (``-s``) and records it (``record_property``).
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import transaction
from hypothesis import strategies as st

from retrieval.api.dify_conditions import SUPPORTED
from tests.conftest import API, bearer
from tests.fuzzing import (
    HOSTILE_NUMBERS,
    HOSTILE_TEXT,
    JSON_VALUES,
    MISSING,
    MOMENTS,
    NUMBERS,
    RATES,
    SCALARS,
    TEXT,
    as_json,
    fuzz,
    leaks,
    make_sides,
    mostly,
    normalizer,
    report,
)


def dify_bodies(kb_ids: list[int], words: list[str]):
    odd_ids = st.sampled_from([f" {kb_ids[0]} ", "0", "-1", "9" * 19, "9" * 30, "1e3", "１２"])
    names = st.sampled_from(["category", "site", "upload_date", "created_at", "n"])
    condition = st.fixed_dictionaries(
        {
            "name": mostly(names | st.lists(names, min_size=1, max_size=2), JSON_VALUES),
            "comparison_operator": mostly(
                st.sampled_from(SUPPORTED), st.sampled_from(["contains", ">", "IS"]) | SCALARS
            ),
        },
        optional={
            "value": st.sampled_from(["pumps", "sensors", *words])
            | MOMENTS
            | HOSTILE_TEXT
            | HOSTILE_NUMBERS
            | st.lists(SCALARS | st.sampled_from(words), max_size=4)
            | JSON_VALUES,
        },
    )
    metadata_condition = mostly(
        st.fixed_dictionaries(
            {"conditions": st.lists(condition, min_size=1, max_size=3)},
            optional={"logical_operator": mostly(st.sampled_from(["and", "or"]), SCALARS)},
        ),
        st.none() | JSON_VALUES,
    )
    setting = st.fixed_dictionaries(
        {
            "top_k": mostly(st.integers(min_value=1, max_value=10), NUMBERS | TEXT),
            "score_threshold": mostly(st.sampled_from([0, 0.1, 0.5]), NUMBERS | TEXT),
        }
    )
    return st.fixed_dictionaries(
        {
            "knowledge_id": mostly(st.sampled_from(kb_ids).map(str), odd_ids | JSON_VALUES),
            "query": mostly(st.sampled_from(["pump", "sensor", *words]), TEXT),
            "retrieval_setting": mostly(setting, JSON_VALUES),
        },
        optional={"metadata_condition": metadata_condition},
    )


FINDINGS = [  # the conditions of the security review (metadata_condition of a valid body)
    {"name": "n", "comparison_operator": "=", "value": value}
    for value in ("nan", "inf", "-inf", "1e999")
] + [
    {"name": "upload_date", "comparison_operator": operator, "value": value}
    for operator in ("after", "before")
    for value in (1e20, -1e20)
]


@pytest.mark.django_db
def test_dify_requests_of_both_tenants_never_fail_and_never_cross(record_property, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": RATES}
    a, b = make_sides()
    clients = {"A": bearer(a.raw_key), "B": bearer(b.raw_key)}
    for client in clients.values():
        client.raise_request_exception = False  # a server error is an answer to check
    sides = {"A": (a, b), "B": (b, a)}
    normal = normalizer({a.kb.pk, b.kb.pk, MISSING})
    tally: Counter = Counter()

    def post(client, text: str):
        tally["requests"] += 1
        point = transaction.savepoint()  # a failed statement must not poison the next call
        try:
            return client.post(f"{API}/dify/retrieval", text, content_type="application/json")
        finally:
            transaction.savepoint_rollback(point)

    def check(case) -> None:
        who, body, literal = case
        mine, theirs = sides[who]
        sent = as_json(body, literal)
        response = post(clients[who], sent)
        tally[response.status_code] += 1
        assert response.status_code < 500, (response.status_code, body)
        payload = response.json()
        assert leaks(response.content, theirs, sent) == [], (who, body, payload)
        if response.status_code != 200:
            assert set(payload) == {"error_code", "error_msg"}, payload
            assert response.status_code in (400, 404), (response.status_code, payload)
        else:
            assert set(payload) == {"records"}, payload
            kb_ids = {r["metadata"]["knowledge_base_id"] for r in payload["records"]}
            assert kb_ids <= {mine.kb.pk}, (who, body, kb_ids)
        asked = str(body.get("knowledge_id", "")).strip()
        if asked == str(theirs.kb.pk):  # the other tenant's: as missing as a missing one
            assert response.status_code != 200, (who, body)
            twin = post(clients[who], as_json({**body, "knowledge_id": str(MISSING)}, literal))
            tally["compared_with_a_missing_id"] += 1
            assert (twin.status_code, normal(twin.content)) == (
                response.status_code,
                normal(response.content),
            ), (body, twin.content, response.content)

    for who in ("A", "B"):  # the findings of the security review first, then generated ones
        for condition in FINDINGS:
            body = {
                "knowledge_id": str(sides[who][0].kb.pk),
                "query": "pump",
                "retrieval_setting": {"top_k": 3, "score_threshold": 0},
                "metadata_condition": {"conditions": [condition]},
            }
            check((who, body, False))
    bodies = dify_bodies([a.kb.pk, b.kb.pk, MISSING], [a.word, b.word])
    fuzz(st.tuples(st.sampled_from(["A", "B"]), bodies, st.booleans()), 500, check)

    report(
        record_property,
        "Dify, both tenants' keys",
        requests=tally["requests"],
        answered_200=tally[200],
        answered_400=tally[400],
        answered_404=tally[404],
        compared_with_a_missing_id=tally["compared_with_a_missing_id"],
    )
