"""The tasks that follow a change are queued by their registered names (``retrieval.changes``:
their tasks call back into it), through ``rag_project.celery.enqueue``; a BM25 build that leaves
segments to fold announces it (``bm25store.merge_due``) and ``retrieval.changes`` queues the
merge, so the store queues no task itself."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from rag_project.celery import app, enqueue
from retrieval import changes
from retrieval.bm25store import BM25Store
from retrieval.bm25store import store as store_module
from retrieval.bm25store.merging import MERGE_FACTOR
from tests.conftest import CEILING_S
from tests.factories import add_document
from tests.retrieval.test_bm25_store import make_kb

pytestmark = pytest.mark.django_db


def _queued(name: str, knowledge_base_id: int) -> int:
    """Messages of the task ``name`` for ``knowledge_base_id`` waiting on the test queue."""
    found = 0
    with app.connection_for_read() as conn:
        client = conn.default_channel.client  # the Redis transport's list
        for raw in client.lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1):
            headers = json.loads(raw)["headers"]
            first = headers["argsrepr"].strip("()").split(",")[0]
            found += headers["task"] == name and first == str(knowledge_base_id)
    return found


def test_every_name_the_changes_queue_is_a_registered_task():
    app.loader.import_default_modules()  # what a worker imports at start
    names = {changes.INVALIDATE_AND_WARM, changes.MERGE_SEGMENTS, changes.CALIBRATE_WHEN_SETTLED}
    assert names <= set(app.tasks), names - set(app.tasks)


def test_a_task_queued_by_name_is_sent_and_an_unknown_name_fails_the_caller(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=True):
        enqueue(changes.MERGE_SEGMENTS, 987_654)
    assert _queued(changes.MERGE_SEGMENTS, 987_654) == 1
    misspelt = "retrieval.merge_bm25_segment"
    with (
        pytest.raises(LookupError, match=misspelt),
        django_capture_on_commit_callbacks(execute=True),
    ):
        enqueue(misspelt, 987_654)  # raised here, in the caller: never sent, never lost unseen
    assert _queued(misspelt, 987_654) == 0


def test_a_build_that_leaves_segments_to_fold_has_their_merge_queued(
    django_capture_on_commit_callbacks, monkeypatch
):
    kb = make_kb()
    monkeypatch.setattr(store_module, "BUILD_WAIT_S", CEILING_S)
    store = BM25Store()
    try:
        with django_capture_on_commit_callbacks(execute=True):
            store.get(kb)
            assert _queued(changes.MERGE_SEGMENTS, kb.pk) == 0  # one segment: nothing to fold
            for n in range(MERGE_FACTOR):
                add_document(kb, f"{n}.md", f"# Report {n}\n\nThe turbine found wear {n}.")
                handle = store.get(kb)
        assert len(handle.view.manifest.keys) == MERGE_FACTOR + 1
        assert _queued(changes.MERGE_SEGMENTS, kb.pk) >= 1
    finally:
        store.l2.delete(kb.pk)
        store.l2.client.close()
