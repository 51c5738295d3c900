"""Fuzzing the REST API with two tenants (``tests/fuzzing.py``): no input gets a server error,
and no answer to one tenant's credentials holds anything of the other tenant's.

- schemathesis over every operation of the live schema, called with B's API key (and, for API
  keys, B's signed-in owner) on A's real ids, in the path and in the body: each answer is the
  answer to an id that does not exist (404; 403 for key management with a key), the same but
  for the id, and A's data is unchanged afterwards;
- every operation that takes a body, with bodies generated from its request schema and hostile
  values (NaN, 1e999, huge integers, NUL, unpaired surrogates...), on both tenants' objects with
  both tenants' credentials;
- a JSON body nested 10,000 deep, arrays and objects, to every operation that takes a body: 400.

Each fuzz test prints what it sent (seen with ``-s``) and records the figures as properties of
its report (``record_property``: junit XML).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from functools import partial

import pytest
import schemathesis
from django.db import transaction
from drf_spectacular.generators import SchemaGenerator
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

from tests.api.test_cross_tenant import fingerprint
from tests.api.test_schemathesis import CHECKS, order, session_credentials
from tests.conftest import CEILING_S, bearer, signed_in
from tests.fuzzing import (
    JSON_VALUES,
    MISSING,
    RATES,
    as_json,
    fuzz,
    id_pools,
    leaks,
    make_side,
    make_sides,
    mostly,
    normalizer,
    report,
    values_of,
)

# Examples per operation and variant: valid data, then invalid data.
EXAMPLES = {GenerationMode.POSITIVE: 10, GenerationMode.NEGATIVE: 3}
UPLOAD = ("POST", "/api/v1/knowledge-bases/{id}/documents")
# Every operation of the schema that takes a request body.
BODY_OPERATIONS = [
    ("POST", "/api/v1/api-keys"),
    ("PATCH", "/api/v1/chunks/{id}"),
    ("POST", "/api/v1/context"),
    ("POST", "/api/v1/dify/retrieval"),
    ("PATCH", "/api/v1/documents/{id}"),
    ("POST", "/api/v1/documents/{id}/chunks"),
    ("POST", "/api/v1/documents/{id}/reprocess"),
    ("POST", "/api/v1/knowledge-bases"),
    ("PATCH", "/api/v1/knowledge-bases/{id}"),
    ("POST", "/api/v1/knowledge-bases/{id}/context"),
    UPLOAD,
    ("POST", "/api/v1/knowledge-bases/{id}/documents/delete"),
    ("POST", "/api/v1/knowledge-bases/{id}/search"),
    ("POST", "/api/v1/knowledge-bases/{id}/web-sources"),
    ("POST", "/api/v1/search"),
    ("PATCH", "/api/v1/web-sources/{id}"),
]


def _set_ids(case, resource: str | None, ids: dict[str, int] | None) -> bool:
    """Put ``ids`` (or MISSING for every one when None) where the case names objects: the path
    and the body's id fields. Whether it named any."""

    def pick(name: str) -> int:
        return MISSING if ids is None else ids[name]

    named = False
    if resource is not None:
        case.path_parameters["id"] = pick(resource)
        named = True
    body = case.body
    if isinstance(body, dict):
        for key, make in (
            ("knowledge_base_ids", lambda: [pick("knowledge-bases")]),
            ("knowledge_id", lambda: str(pick("knowledge-bases"))),
            ("ids", lambda: [pick("documents")]),
        ):
            if key in body:
                body[key] = make()
                named = True
        filters = body.get("filters")
        if isinstance(filters, dict) and "document_ids" in filters:
            filters["document_ids"] = [pick("documents")]
            named = True
    return named


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rest_calls_with_another_tenants_ids_answer_as_for_missing_ones_and_leak_nothing(
    live_server, settings, record_property
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": RATES}
    a, b = make_sides()
    before = fingerprint(a.tenant)
    key = ({"Authorization": f"Bearer {b.raw_key}"}, {})
    session = session_credentials(b.owner)
    a_ids = a.ids
    every_a_id = set(a_ids.values()) | {d.pk for d in a.documents} | set(a.chunks)
    normal = normalizer(every_a_id | {MISSING})
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/")
    operations = sorted((result.ok() for result in schema.get_all_operations()), key=order)
    failures: list[str] = []
    tally: Counter = Counter()

    def call(case, credentials):
        headers, cookies = credentials
        if credentials is session:  # the session alone: not a key schemathesis makes up
            (case.headers or {}).pop("Authorization", None)
        tally["requests"] += 1
        response = case.call(
            base_url=live_server.url, headers=headers, cookies=cookies, timeout=CEILING_S
        )
        tally["server_errors"] += response.status_code >= 500
        found = leaks(response.content, a, json.dumps(case.body, default=str))
        if found:
            tally["leaks"] += 1
            failures.append(f"{case.operation.label}: B's answer holds A's {found}")
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, FailureGroup) as exc:  # collected: one report of every failure
            failures.append(f"{case.operation.label}: {exc}\n{case.as_curl_command(headers)}")
        return response

    def check(operation, resource, credentials, mode, case) -> None:
        if not _set_ids(case, resource, a_ids):
            call(case, credentials)  # names none of A's objects: only what it answers
            return
        theirs = call(case, credentials)
        _set_ids(case, resource, None)
        missing = call(case, credentials)
        tally["twins"] += 1
        label = f"{operation.label} ({mode.value})"
        if theirs.status_code < 400:
            failures.append(f"{label}: B's call on A's ids answered {theirs.status_code}")
        # Valid data on A's object: not found (key management refuses a key first), or a
        # 400 the body earns by itself (the same for a missing id, compared below).
        expected = 403 if "/api-keys" in operation.path and credentials is key else 404
        if mode == GenerationMode.POSITIVE and theirs.status_code not in (expected, 400):
            failures.append(f"{label}: {theirs.status_code}, not {expected}")
        if (theirs.status_code, normal(theirs.content)) != (
            missing.status_code,
            normal(missing.content),
        ):
            failures.append(
                f"{label}: A's ids answered {theirs.status_code} {theirs.content[:300]!r}, "
                f"a missing id {missing.status_code} {missing.content[:300]!r}"
            )

    for operation in operations:
        resource = operation.path.split("/")[3] if "{id}" in operation.path else None
        path_parameters = {"id": a_ids[resource]} if resource else None
        for credentials in (key, session) if "/api-keys" in operation.path else (key,):
            for mode, examples in EXAMPLES.items():
                strategy = operation.as_strategy(
                    generation_mode=mode,
                    headers=credentials[0],
                    cookies=credentials[1],
                    path_parameters=path_parameters,
                )
                # invalid data for an operation whose only input was fixed: nothing to run
                with contextlib.suppress(Unsatisfiable):
                    fuzz(
                        strategy,
                        examples,
                        partial(check, operation, resource, credentials, mode),
                    )

    report(
        record_property,
        "REST, B's credentials on A's ids",
        operations=len(operations),
        requests=tally["requests"],
        compared_with_a_missing_id=tally["twins"],
        server_errors=tally["server_errors"],
        leaks=tally["leaks"],
    )
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:10])
    assert fingerprint(a.tenant) == before, "B's calls changed A's data"
    assert tally["twins"] > 150, tally


# --------------------------------------------------------------------------- bodies


@pytest.mark.django_db
def test_rest_bodies_with_hostile_values_never_fail_and_never_cross(record_property, settings):
    """Every operation that takes a body, with bodies generated from its request schema and
    hostile values, on both tenants' objects, with both tenants' credentials."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": RATES}
    a, b = make_sides()
    sides = {"A": (a, b), "B": (b, a)}
    clients = {
        who: {
            "key": bearer(side.raw_key),
            "session": signed_in(side.owner, side.tenant.slug),
        }
        for who, (side, _) in sides.items()
    }
    for pair in clients.values():
        for client in pair.values():
            client.raise_request_exception = False  # a server error is an answer to check
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    pools, words = id_pools(a, b), [a.word, b.word]
    bodies = {
        operation: mostly(
            values_of(
                schema["paths"][operation[1]][operation[0].lower()]["requestBody"]["content"][
                    "application/json"
                ]["schema"],
                components,
                pools,
                words,
            ),
            JSON_VALUES,
        )
        for operation in BODY_OPERATIONS
    }
    tally: Counter = Counter()

    def check(case) -> None:
        who, whose, ((method, template), body), literal = case
        mine, theirs = sides[who]
        target = mine if whose == "mine" else theirs
        names_object = "{id}" in template
        path = template
        if names_object:
            path = template.replace("{id}", str(target.ids[template.split("/")[3]]))
        client = clients[who]["session" if "/api-keys" in path else "key"]
        sent = as_json(body, literal)
        point = transaction.savepoint()  # each call on the same objects, and none poisons the next
        try:
            response = getattr(client, method.lower())(path, sent, content_type="application/json")
        finally:
            transaction.savepoint_rollback(point)
        tally["requests"] += 1
        tally[response.status_code // 100] += 1
        assert response.status_code < 500, (method, path, body, response.content[:300])
        found = leaks(response.content, theirs, sent)
        assert found == [], (who, method, path, body, found)
        if names_object and target is theirs:
            assert response.status_code in (400, 403, 404), (who, method, path, body)

    operations = st.sampled_from(BODY_OPERATIONS).flatmap(
        lambda operation: st.tuples(st.just(operation), bodies[operation])
    )
    who = st.sampled_from(["A", "B"])
    fuzz(st.tuples(who, st.sampled_from(["mine", "theirs"]), operations, st.booleans()), 600, check)

    report(
        record_property,
        "REST bodies, both tenants' credentials",
        operations=len(BODY_OPERATIONS),
        requests=tally["requests"],
        answered_2xx=tally[2],
        answered_4xx=tally[4],
    )


# --------------------------------------------------------------------------- deep nesting

DEPTH = 10_000
DEEP = {
    "arrays": "[" * DEPTH + "]" * DEPTH,
    "objects": '{"a":' * DEPTH + "1" + "}" * DEPTH,
}


def test_the_deep_bodies_go_to_every_operation_that_takes_a_body():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    taking = {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if "requestBody" in operation
    }
    assert taking == set(BODY_OPERATIONS)


@pytest.fixture
def deep_target():
    """A tenant's objects, and credentials that may change them."""
    side = make_side("Deltaform", "deltawave")
    return side.ids, bearer(side.raw_key), signed_in(side.owner, side.tenant.slug)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path"),
    BODY_OPERATIONS,
)
def test_a_json_body_nested_ten_thousand_deep_answers_400(method, path, deep_target):
    ids, key, session = deep_target
    client = session if "/api-keys" in path else key
    client.raise_request_exception = False
    url = path.replace("{id}", str(ids[path.split("/")[3]])) if "{id}" in path else path
    for shape, text in DEEP.items():
        response = getattr(client, method.lower())(url, text, content_type="application/json")
        assert response.status_code == 400, (shape, response.status_code, response.content[:300])
        body = response.json()
        if path.endswith("/dify/retrieval"):
            assert body["error_code"] == 3001 and "nested" in body["error_msg"], body
        else:
            assert body["error"]["code"] == "parse_error", body
            assert "nested at most 64 deep" in body["error"]["message"], body
