"""Schemathesis stateful run over the live API: sequences of calls linked through their
answers (a created knowledge base's id used by the next call, and so on), inferred by
schemathesis from the schema; no sequence may reach a 5xx or an answer off the schema."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings

from tenancy.services import create_api_key
from tests.api.conftest import MANUALS, make_kb
from tests.api.test_schemathesis import CHECKS
from tests.conftest import CEILING_S
from tests.factories import TenantFactory

SCENARIOS = 25


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_linked_call_sequences_never_fail(live_server, settings):
    rates = {"api_key": "100000/min", "user": "100000/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    tenant = TenantFactory()
    make_kb(tenant, "Manuals", MANUALS)
    _, raw = create_api_key(tenant=tenant, name="stateful", scopes=["read", "write"])
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/")
    # API keys are managed by signed-in owners only; a key calling them only learns 403.
    schema = schema.exclude(path_regex="api-keys")
    base = schema.as_state_machine()
    assert base.bundles, "schemathesis found no links between operations"
    headers = {"Authorization": f"Bearer {raw}"}
    calls: list[str] = []

    class Machine(base):
        def get_call_kwargs(self, case):
            calls.append(f"{case.operation.method.upper()} {case.operation.path}")
            return {"base_url": live_server.url, "headers": headers, "timeout": CEILING_S}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, headers=headers)

    # Steps depend on what the live server answered, which Hypothesis cannot replay: within
    # one run it would take a second scenario that branches differently for a flaky strategy.
    # So every scenario is a run of its own (one example, a fresh random seed): nothing is
    # replayed, and a failed check (FailureGroup) fails the test at once.
    scenario = hypothesis_settings(
        max_examples=1,
        stateful_step_count=6,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    for _ in range(SCENARIOS):
        Machine.run(settings=scenario)
    assert len(calls) > SCENARIOS  # sequences, not single calls
    # Linked steps reached operations that need an id another call produced.
    assert any("{id}" in call for call in calls)
