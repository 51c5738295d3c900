"""Schemathesis against the live schema of a live server: generated requests to every operation
(with random ids, and with the ids of real objects; valid data, then invalid data) never get a
5xx, and every answer matches the schema: documented status, content type and body."""

from __future__ import annotations

import contextlib
from functools import partial

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.test import Client
from django.utils.crypto import get_random_string
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from knowledge.web.sources import create_web_source
from tenancy.models import ApiKey, Membership
from tenancy.services import create_api_key
from tests.api.conftest import MANUALS, make_kb
from tests.conftest import CEILING_S
from tests.factories import MembershipFactory, TenantFactory

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Examples per operation and variant: valid data, then invalid data (few enough for every run).
EXAMPLES = {GenerationMode.POSITIVE: 20, GenerationMode.NEGATIVE: 6}
# Deleting comes late, so the other operations still find the objects, and API keys last: a
# generated id may revoke the key everything else is called with.
ORDER = {"GET": 0, "POST": 1, "PATCH": 2, "DELETE": 3}


def order(operation) -> tuple:
    return ("/api-keys" in operation.path, ORDER[operation.method.upper()], operation.path)


def fuzz(strategy, examples: int, check) -> None:
    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        check(case)

    run()


def session_credentials(user) -> tuple[dict, dict]:
    """Headers and cookies of a signed-in session (CSRF token included) for ``user``."""
    client = Client()
    client.force_login(user)
    token = get_random_string(32)
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    cookies = {
        django_settings.SESSION_COOKIE_NAME: session,
        django_settings.CSRF_COOKIE_NAME: token,
    }
    return {"X-CSRFToken": token}, cookies


def real_ids(kb, key: ApiKey) -> dict[str, int]:
    document = kb.docs["pumps.md"]
    source = create_web_source(
        tenant=kb.tenant, knowledge_base=kb, start_url="https://help.example.com/", sync=False
    )
    return {
        "knowledge-bases": kb.pk,
        "documents": document.pk,
        "chunks": document.chunks.first().pk,
        "api-keys": key.pk,
        "web-sources": source.pk,
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_generated_requests_get_no_server_error_and_schema_conforming_answers(
    live_server, settings
):
    rates = {"api_key": "100000/min", "user": "100000/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    tenant = TenantFactory()
    owner = MembershipFactory(tenant=tenant, role=Membership.Role.OWNER).user
    kb = make_kb(tenant, "Manuals", MANUALS)
    _, raw = create_api_key(tenant=tenant, name="fuzz", scopes=["read", "write"])
    sacrificed, _ = create_api_key(tenant=tenant, name="to revoke")
    ids = real_ids(kb, sacrificed)
    # API keys are managed by signed-in owners; everything else is called with the key.
    bearer = ({"Authorization": f"Bearer {raw}"}, {})
    session = session_credentials(owner)

    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/")
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),
        key=order,
    )
    # 23, 6 of web sources, and curation (PATCH chunk, POST document chunk, PATCH document)
    # and bulk (retry failed, delete many)
    assert len(operations) == 34
    failures: list[str] = []
    calls = 0

    def check(operation, credentials, case) -> None:
        nonlocal calls
        calls += 1
        headers, cookies = credentials
        if credentials is session:  # the session alone: not a key schemathesis makes up
            (case.headers or {}).pop("Authorization", None)
        # A ceiling, not a deadline: a loaded machine answers slowly, not wrongly.
        response = case.call(
            base_url=live_server.url, headers=headers, cookies=cookies, timeout=CEILING_S
        )
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, FailureGroup) as exc:  # collected: one report of every failure
            failures.append(f"{operation.label}: {exc}\n{case.as_curl_command(headers)}")

    for operation in operations:
        variants = [None]
        if "{id}" in operation.path:
            variants.append({"id": ids[operation.path.split("/")[3]]})
        credentials = session if "/api-keys" in operation.path else bearer
        for mode, examples in EXAMPLES.items():
            for path_parameters in variants:
                strategy = operation.as_strategy(
                    generation_mode=mode,
                    headers=credentials[0],
                    cookies=credentials[1],
                    path_parameters=path_parameters,
                )
                # invalid data for an operation whose only input was fixed: nothing to run
                with contextlib.suppress(Unsatisfiable):
                    fuzz(strategy, examples, partial(check, operation, credentials))

    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:10])
    assert calls > 500, calls
