"""A knowledge base that keeps changing has one calibration waiting, not one per change
(``retrieval.changes``): the waiting task sees every change made before it runs, and queues
itself again while the knowledge base is still changing."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.core.cache import cache

from rag_project.celery import app
from retrieval import changes
from tests.factories import KnowledgeBaseFactory, add_document

pytestmark = pytest.mark.django_db


def _calibrations_queued(kb_id: int) -> list[tuple[int, int]]:
    """(knowledge base id, version) of the calibration tasks for ``kb_id`` on the test queue,
    oldest first."""
    found = []
    with app.connection_for_read() as conn:
        client = conn.default_channel.client  # the Redis transport's list
        for raw in client.lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1):
            headers = json.loads(raw)["headers"]
            if headers["task"] == "retrieval.calibrate_when_settled":
                args = tuple(int(a) for a in headers["argsrepr"].strip("()").split(",") if a)
                if args[0] == kb_id:
                    found.append(args)
    return found[::-1]  # the transport pushes at the head


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    cache.delete(changes.CALIBRATION_PENDING.format(kb.pk))
    return kb


def test_a_burst_of_changes_queues_one_calibration(kb, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(3):
            add_document(kb, f"note{i}.txt", f"The pump {i} was serviced in spring.")
    kb.refresh_from_db()
    queued = _calibrations_queued(kb.pk)
    assert len(queued) == 1  # one per change before: three
    assert queued[0][1] < kb.index_version  # the version the first change saw


def test_the_waiting_task_requeues_itself_while_the_knowledge_base_changes(
    kb, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        add_document(kb, "a.txt", "The pump was serviced in spring.")
        add_document(kb, "b.txt", "The valve was replaced in summer.")
    kb.refresh_from_db()
    [(_, seen)] = _calibrations_queued(kb.pk)

    # It runs and finds the knowledge base changed since: it waits again, with the new version.
    with django_capture_on_commit_callbacks(execute=True):  # a task runs outside a transaction
        assert changes.calibrate_when_settled(kb.pk, seen) == "superseded"
    assert _calibrations_queued(kb.pk)[1:] == [(kb.pk, kb.index_version)]

    # A change while that one waits queues nothing more; once it has run (and found too few
    # chunks to calibrate), the next change queues its own.
    with django_capture_on_commit_callbacks(execute=True):
        add_document(kb, "c.txt", "The fan was cleaned in autumn.")
    assert len(_calibrations_queued(kb.pk)) == 2
    kb.refresh_from_db()
    assert changes.calibrate_when_settled(kb.pk, kb.index_version).startswith("too few chunks")
    with django_capture_on_commit_callbacks(execute=True):
        add_document(kb, "d.txt", "The belt was tightened in winter.")
    kb.refresh_from_db()
    assert _calibrations_queued(kb.pk)[-1] == (kb.pk, kb.index_version)
    assert len(_calibrations_queued(kb.pk)) == 3


def test_without_redis_every_change_still_queues_its_calibration(
    kb, django_capture_on_commit_callbacks, settings
):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(2):
            add_document(kb, f"note{i}.txt", f"The pump {i} was serviced in spring.")
    assert len(_calibrations_queued(kb.pk)) == 2
