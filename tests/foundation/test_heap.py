"""rag_project.heap: a serving process's long-lived objects frozen out of full collections, at the
end of its warm-up and after a full collection slower than RAG_GC_FREEZE_ABOVE_MS. The suite runs
with it off (test settings); these tests turn it on and unfreeze after."""

from __future__ import annotations

import gc
import weakref

import pytest
from celery.signals import task_postrun

from rag_project import heap

pytestmark = pytest.mark.django_db


class Node:
    """A container that can take part in a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref:
    """A two-node cycle no one refers to: only the cyclic collector can free it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def thawed(settings):
    settings.RAG_GC_FREEZE_ABOVE_MS = 50.0
    settings.RAG_HEALTH_DETAILS = "public"  # /healthz's full report, with heap
    heap.uninstall()
    yield
    heap.uninstall()
    gc.unfreeze()


def test_frozen_objects_are_skipped_by_collections_and_later_ones_still_collected():
    before = cycle()
    assert heap.freeze() > 0
    assert gc.get_freeze_count() > 0
    assert len(gc.get_objects()) < gc.get_freeze_count()  # the frozen are not walked

    after = cycle()
    gc.collect()
    assert after() is None  # made after the freeze: collected as ever
    assert before() is None  # garbage when frozen: the full collection first freed it

    kept = Node()
    kept.other = kept
    held = weakref.ref(kept)
    heap.freeze(full=False)
    del kept
    gc.collect()
    assert held() is not None  # the documented cost: a frozen cycle stays
    gc.unfreeze()
    gc.collect()
    assert held() is None


def test_a_slow_full_collection_freezes_after_the_response(client, settings):
    settings.RAG_GC_FREEZE_ABOVE_MS = 1e-9  # every full collection counts as slow
    assert heap.install()
    assert not heap.install()  # once per process
    frozen = gc.get_freeze_count()
    gc.collect()
    stats = heap.stats()
    assert stats["full_collections"] >= 1 and stats["last_full_collection_ms"] >= 0
    assert gc.get_freeze_count() == frozen  # not inside the collector: after the response

    client.get("/healthz")
    assert gc.get_freeze_count() > frozen
    body = client.get("/healthz").json()["heap"]
    # (frozen objects that reference counting frees leave the count)
    assert body["freezes"] >= 1 and body["frozen_objects"] >= frozen
    assert body["slowest_full_collection_ms"] >= body["last_full_collection_ms"]


def test_a_fast_full_collection_freezes_nothing(client, settings):
    settings.RAG_GC_FREEZE_ABOVE_MS = 1e9
    heap.install()
    gc.collect()
    client.get("/healthz")
    assert gc.get_freeze_count() == 0
    assert heap.freeze_if_due() == 0


def test_a_celery_task_ending_freezes_when_due(settings):
    settings.RAG_GC_FREEZE_ABOVE_MS = 1e-9
    heap.install()
    gc.collect()
    task_postrun.send(sender=None, task_id="t", task=None, args=(), kwargs={}, retval=None)
    assert gc.get_freeze_count() > 0


def test_off_at_zero(client, settings):
    settings.RAG_GC_FREEZE_ABOVE_MS = 0
    assert not heap.install()
    assert heap.freeze() == 0
    gc.collect()
    client.get("/healthz")
    assert gc.get_freeze_count() == 0
