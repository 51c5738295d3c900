"""Without DATABASE_REPLICA_URL nothing changes: every read of a search is the primary's, no
replica is asked anything, and the trace says so. (Searches through a real streaming replica:
test_replica_streaming.py.)"""

import threading

import pytest
from django.db import connections

from retrieval import replica
from retrieval.search import RAGService

pytestmark = pytest.mark.django_db


def test_without_a_replica_a_search_reads_the_primary_and_says_so(
    manuals, django_assert_num_queries
):
    assert not replica.replica_configured()
    assert list(connections.settings) == ["default"]
    with django_assert_num_queries(0):  # no version check against anything
        route = replica.route_for(manuals.tenant_id, {manuals.pk: manuals.index_version})
    assert route == replica.Route() and route.database == "primary"
    result = RAGService(manuals.tenant).search("mechanical seal of the P-100 pump", manuals.pk)
    assert result.hits[0].document_title == "Pump handbook"
    trace = result.to_dict()["trace"]
    assert trace["database"] == "primary" and trace["replica_lag_fallback"] is False
    assert trace["fallbacks"] == []


def test_the_route_holds_only_inside_its_block_and_its_thread():
    chosen = replica.Route(replica.REPLICA)
    seen_elsewhere = []
    assert replica.search_reads() == replica.PRIMARY
    with replica.reading_from(chosen):
        assert replica.search_reads() == replica.REPLICA
        other = threading.Thread(target=lambda: seen_elsewhere.append(replica.search_reads()))
        other.start()
        other.join()
    assert replica.search_reads() == replica.PRIMARY
    assert seen_elsewhere == [replica.PRIMARY]  # a write path in another thread never sees it


def test_bench_replica_refuses_to_run_without_a_replica():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="DATABASE_REPLICA_URL"):
        call_command("bench", "replica", "--docs", "1", "--queries", "2")
