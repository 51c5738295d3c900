"""Changes reach every process: the rebuild task in a real Celery worker, another real process's
L1, and the queueing that must not fail a write when the broker is down."""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys

import pytest
from django.db import connection

from knowledge.models import Document, KnowledgeBase
from knowledge.services import documents as document_services
from retrieval import changes
from retrieval.bm25store import BM25Store, Tier
from retrieval.models import BM25Manifest
from tests.conftest import CEILING_S, REPO, subprocess_env, wait_until
from tests.retrieval.test_bm25_store import (
    MANUAL,
    NOTES,
    add_document,
    chunk_ids,
    hits,
    make_kb,
    version_of,
)


def l3_version(kb: KnowledgeBase) -> int | None:
    return BM25Manifest.objects.filter(knowledge_base=kb).values_list("version", flat=True).first()


@pytest.fixture
def purge_queue():
    """Tasks queued by commits in tests without a worker are not left for the next test's."""
    yield
    from rag_project.celery import app

    app.control.purge()


@pytest.fixture
def store():
    store = BM25Store()
    yield store
    store.l2.client.close()


# --------------------------------------------------------------------------- the worker


@pytest.mark.e2e
def test_the_worker_invalidates_and_warms_so_the_next_search_does_not_build(
    celery_worker_process, store
):
    kb = make_kb()
    wait_until(lambda: l3_version(kb) == version_of(kb), "the worker to warm the first version")

    uploaded = document_services.create_document(
        tenant=kb.tenant, knowledge_base=kb, name="manual.md", stream=_stream(MANUAL)
    )
    wait_until(
        lambda: Document.objects.get(pk=uploaded.pk).status == Document.Status.READY,
        "the worker to process the upload",
    )
    wait_until(lambda: l3_version(kb) == version_of(kb), "the worker to warm the new version")
    after_upload = store.get(kb)
    assert after_upload.tier in (Tier.L2, Tier.L3) and store.build_count == 0
    assert after_upload.version == version_of(kb)
    assert hits(after_upload, "zebrafish") == chunk_ids(kb, uploaded)

    document_services.delete_document(tenant=kb.tenant, document=uploaded)
    wait_until(lambda: l3_version(kb) == version_of(kb), "the worker to warm after the delete")
    after_delete = store.get(kb)
    assert after_delete.version == version_of(kb) > after_upload.version
    assert after_delete.tier in (Tier.L2, Tier.L3) and store.build_count == 0
    assert hits(after_delete, "zebrafish") == []


def _stream(data: bytes):
    import io

    return io.BytesIO(data)


# --------------------------------------------------------------------------- another process

OTHER_PROCESS = """
import json, sys
import django
django.setup()
from knowledge.analysis import get_analyzer
from knowledge.models import KnowledgeBase
from retrieval.bm25store import BM25Store
store = BM25Store()
print("ready", flush=True)
for line in sys.stdin:
    kb_id, word = line.split()
    handle = store.get(KnowledgeBase.objects.get(pk=int(kb_id)))
    found = [chunk_id for chunk_id, _ in handle.index.search(get_analyzer().tokens(word), 10)]
    print(json.dumps({"version": handle.version, "tier": handle.tier, "hits": found}), flush=True)
"""


class OtherProcess:
    """A real second Django process with its own BM25Store, driven line by line."""

    def __init__(self) -> None:
        env = subprocess_env(
            DJANGO_SETTINGS_MODULE="rag_project.settings.test",
            RAG_TEST_DB_NAME=connection.settings_dict["NAME"],
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESS],
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._line() == "ready"

    def get(self, kb: KnowledgeBase, word: str) -> dict:
        self.proc.stdin.write(f"{kb.pk} {word}\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def _line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], CEILING_S)
        if not ready:
            raise AssertionError("the other process did not answer")
        line = self.proc.stdout.readline()
        assert line, f"the other process exited with {self.proc.wait()}"
        return line.strip()

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.django_db(transaction=True)
def test_no_process_serves_a_stale_index_after_a_change_elsewhere(purge_queue):
    kb = make_kb()
    manual = add_document(kb, "manual.md", MANUAL)
    other = OtherProcess()
    try:
        first = other.get(kb, "zebrafish")
        assert first["version"] == version_of(kb)
        assert first["hits"] == chunk_ids(kb, manual)
        assert other.get(kb, "zebrafish")["tier"] == "l1"  # its L1 now holds this version

        notes = add_document(kb, "notes.md", NOTES)  # committed here, in this process
        added = other.get(kb, "quokka")
        assert added["version"] == version_of(kb) > first["version"]
        assert added["tier"] != "l1"
        assert added["hits"] == chunk_ids(kb, notes)

        document_services.delete_document(tenant=kb.tenant, document=manual)
        deleted = other.get(kb, "zebrafish")
        assert deleted["version"] == version_of(kb) > added["version"]
        assert deleted["hits"] == []
    finally:
        other.close()


# --------------------------------------------------------------------------- queueing


@pytest.fixture
def broker_down(monkeypatch, tmp_path):
    """Point the Celery app at a broker socket nobody listens on."""
    from rag_project.celery import app

    def fresh_pools() -> None:  # dropped, not closed: kombu's registry may share them
        app._pool = None
        app.amqp._producer_pool = None

    fresh_pools()
    monkeypatch.setattr(app.conf, "broker_url", f"redis+socket://{tmp_path}/nobody.sock")
    yield
    fresh_pools()  # before monkeypatch restores the URL, so no pool keeps the dead one
    monkeypatch.undo()
    fresh_pools()


@pytest.mark.django_db
def test_a_change_commits_and_logs_when_the_broker_is_down(
    broker_down, caplog, django_capture_on_commit_callbacks
):
    kb = make_kb(filler=False)
    with (
        caplog.at_level(logging.WARNING, logger="rag_project.celery"),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        document = add_document(kb, "manual.md", MANUAL)
    assert callbacks  # the receiver queued on commit ...
    assert Document.objects.get(pk=document.pk).status == Document.Status.READY  # ... and no raise
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"retrieval.invalidate_and_warm_bm25({kb.pk}," in m for m in messages)
    handle = BM25Store().get(kb)  # searches build on demand instead
    assert handle.tier == Tier.BUILD and handle.version == version_of(kb)


@pytest.mark.django_db
def test_the_task_service_is_safe_to_run_twice_and_after_deletion(store):
    kb = make_kb()
    assert changes.invalidate_and_warm(kb.pk) == f"warmed v{version_of(kb)} from build (full)"
    assert l3_version(kb) == version_of(kb)
    assert changes.invalidate_and_warm(kb.pk) == "current"  # a duplicate delivery builds nothing
    assert changes.invalidate_and_warm(kb.pk, index_version=version_of(kb) - 1) == "superseded"

    kb_id = kb.pk
    store.get(kb)
    kb.delete()
    assert changes.invalidate_and_warm(kb_id) == "deleted"
    assert store.l2.client.exists(f"rag:bm25:{kb_id}") == 0
