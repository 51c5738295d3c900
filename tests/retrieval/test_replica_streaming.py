"""Searches read from a real streaming replica (DATABASE_REPLICA_URL), and never miss a change
the replica has not replayed yet.

One deployment of its own (``tests/reliability/faults/stack.Stack``) is the primary; a hot
standby follows it by streaming replication (``replica_pair.ReplicaPair``). Each search runs in
a fresh Django process, with ``DATABASE_REPLICA_URL`` naming the standby or unset, so nothing
is cached in a process between steps.
"""

import pytest

from tests.conftest import wait_until
from tests.reliability.faults.stack import Stack
from tests.retrieval.replica_pair import ReplicaPair

pytestmark = pytest.mark.slow

DOCUMENTS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "valves.md": "# Valve guide\n\nValve V-7 is a gate valve. Keep it closed during cleaning.",
    "sensors.md": "# Sensor notes\n\nThe TH01 sensor reports the casing temperature every "
    "minute and alarms above 85 degrees.",
}

ADD = """
import json
from knowledge.models import KnowledgeBase
from tests.factories import add_document
kb = KnowledgeBase.objects.get(pk=KB)
ids = [add_document(kb, name, text).pk for name, text in DOCUMENTS.items()]
kb.refresh_from_db()
print("RESULT " + json.dumps({"documents": ids, "version": kb.index_version}))
"""

SEARCH = """
import json
from django.db import connections
from retrieval.search.service import RAGService
from tenancy.models import Tenant
result = RAGService(Tenant.objects.get(pk=TENANT)).search(QUERY, KB, top_k=5, mode="hybrid")
trace = result.trace
print("RESULT " + json.dumps({
    "hits": [[h.chunk_id, h.document_id, h.score] for h in result.hits],
    "database": trace.database,
    "replica_lag_fallback": trace.replica_lag_fallback,
    "fallbacks": trace.fallbacks,
    "legs": trace.retrieval_path,
    "aliases": sorted(connections.settings),
}))
"""

# The reads a search makes on a miss of every cache, under each route: a full BM25 build (the
# version, the searchable documents, their tokens), the store's version lookup and a vector
# matrix load (host files off: every row from the route's database).
READS = """
import json
from django.test import override_settings
from knowledge.models import KnowledgeBase
from retrieval import replica
from retrieval.bm25store.build import build_full
from retrieval.bm25store.build import current_version
from retrieval.vector.matrix import load
kb = KnowledgeBase.objects.get(pk=KB)
out = {}
for name, route in (("primary", replica.Route()), ("replica", replica.Route(replica.REPLICA))):
    with replica.reading_from(route), override_settings(VECTOR_HOST_FILES=False):
        built = build_full(kb)
        matrix, source = load(kb, None, 1 << 30)
        out[name] = {
            "current_version": current_version(kb),
            "bm25_version": built.manifest.version,
            "bm25_documents": sorted(int(d) for d in built.manifest.doc_ids),
            "matrix_version": matrix.version,
            "matrix_source": source,
            "matrix_documents": sorted({int(d) for d in matrix.live_rows()[1]}),
        }
print("RESULT " + json.dumps(out))
"""


def add(pair: ReplicaPair, documents: dict) -> dict:
    code = ADD.replace("KB", str(pair.stack.kb)).replace("DOCUMENTS", repr(documents))
    return pair.shell(code, replica=False)


def search(pair: ReplicaPair, query: str, *, replica: bool) -> dict:
    code = (
        SEARCH.replace("TENANT", str(pair.stack.tenant))
        .replace("QUERY", repr(query))
        .replace("KB", str(pair.stack.kb))
    )
    return pair.shell(code, replica=replica)


def chunk_reads_on_standby(pair: ReplicaPair) -> int:
    """Scans of the chunk table the standby has served (its own statistics)."""
    (count,) = pair.on_standby(
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
        "WHERE relname = 'knowledge_chunk'"
    )
    return count


@pytest.fixture
def pair():
    with Stack(embedding={"provider": "hash", "dimensions": 32}) as stack:
        replica = ReplicaPair(stack)
        try:
            yield replica
        finally:
            replica.stop()


def test_searches_read_the_replica_and_fall_back_to_the_primary_while_it_lags(pair):
    first = add(pair, DOCUMENTS)
    version, pumps = first["version"], first["documents"][0]
    pair.start()
    wait_until(pair.caught_up, "the standby to replay the primary's WAL")
    assert pair.on_standby("SELECT pg_is_in_recovery()") == (True,)
    assert pair.version(pair.on_standby, pair.stack.kb) == version

    # Same hits through the replica as through the primary; the trace says which served.
    without = search(pair, "mechanical seal drips", replica=False)
    assert without["aliases"] == ["default"]  # no DATABASE_REPLICA_URL: no second database
    assert without["database"] == "primary" and without["replica_lag_fallback"] is False
    assert without["fallbacks"] == []
    reads_before = chunk_reads_on_standby(pair)
    through = search(pair, "mechanical seal drips", replica=True)
    assert through["aliases"] == ["default", "replica"]
    assert through["database"] == "replica" and through["replica_lag_fallback"] is False
    assert through["fallbacks"] == []
    assert through["legs"] == without["legs"] == ["vector", "keyword", "fusion"]
    assert through["hits"] == without["hits"]
    assert without["hits"][0][1] == pumps
    # The chunk rows really were read on the standby (its statistics flush as the process ends).
    wait_until(
        lambda: chunk_reads_on_standby(pair) > reads_before, "the standby's chunk-table reads"
    )

    # Replay paused: a document added on the primary is not on the replica; the search sees
    # that from the versions, reads the primary, and finds the document.
    pair.on_standby("SELECT pg_wal_replay_pause()")
    wait_until(
        lambda: pair.on_standby("SELECT pg_get_wal_replay_pause_state()") == ("paused",),
        "replay to pause",
    )
    added = add(pair, {"gearbox.md": "The G-9 gearbox needs synthetic oil every spring."})
    (new_document,) = added["documents"]
    assert pair.version(pair.on_standby, pair.stack.kb) == version < added["version"]
    lagging = search(pair, "gearbox synthetic oil", replica=True)
    assert lagging["database"] == "primary" and lagging["replica_lag_fallback"] is True
    assert any("replica behind" in note for note in lagging["fallbacks"])
    assert lagging["hits"] and lagging["hits"][0][1] == new_document

    # Under the replica's route, what a search builds and loads on a cache miss is read from
    # the replica's snapshot and labelled with its version: the document is not there yet.
    reads = pair.shell(READS.replace("KB", str(pair.stack.kb)), replica=True)
    on_primary, on_replica = reads["primary"], reads["replica"]
    assert on_primary["current_version"] == on_primary["bm25_version"] == added["version"]
    assert on_primary["matrix_version"] == added["version"]
    assert on_replica["current_version"] == on_replica["bm25_version"] == version
    assert on_replica["matrix_version"] == version and on_replica["matrix_source"] == "load"
    assert on_primary["bm25_documents"] == on_primary["matrix_documents"]
    assert on_primary["bm25_documents"] == sorted([*first["documents"], new_document])
    assert on_replica["bm25_documents"] == on_replica["matrix_documents"]
    assert on_replica["bm25_documents"] == sorted(first["documents"])

    # Replay resumed: once the replica has the version, it serves again, with the document.
    pair.on_standby("SELECT pg_wal_replay_resume()")
    wait_until(
        lambda: pair.version(pair.on_standby, pair.stack.kb) == added["version"],
        "the standby to replay the new version",
    )
    caught_up = search(pair, "gearbox synthetic oil", replica=True)
    assert caught_up["database"] == "replica" and caught_up["replica_lag_fallback"] is False
    assert caught_up["hits"] == lagging["hits"]

    # A replica that cannot be reached sends the search to the primary, which says so.
    pair.stop()
    down = search(pair, "gearbox synthetic oil", replica=True)
    assert down["database"] == "primary" and down["replica_lag_fallback"] is False
    assert "replica unavailable -> primary" in down["fallbacks"]
    assert down["hits"] == lagging["hits"]
