"""``bench fairness`` runs end to end on real workers and reports every figure it promises."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tenancy.models import Tenant


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_bench_fairness_json_reports_b_alone_and_behind_as_queue():
    out = StringIO()
    call_command("bench", "fairness", "--docs", "8", "--alone", "2", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["docs_a"] == 8 and result["workers"] == 2
    assert len(result["b_alone_s"]) == 2 and all(s > 0 for s in result["b_alone_s"])
    assert result["b_with_a_queued_s"] > 0
    ratio = result["b_with_a_queued_s"] / result["b_alone_median_s"]  # of the rounded figures
    assert abs(result["ratio"] - ratio) < 0.05
    assert 0 <= result["a_done_while_b_waited"] <= 8
    assert not Tenant.objects.filter(name__startswith="bench fairness").exists()  # cleaned up
