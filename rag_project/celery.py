"""The Celery application (Redis broker, JSON only, explicit time limits, late acks) and
``enqueue``, the one way the project queues a task.

Configuration comes from Django settings prefixed ``CELERY_`` (see settings/base.py). Start a
worker with ``celery -A rag_project worker``; ``make run`` starts one beside the web server.
"""

from __future__ import annotations

import logging
import os
import threading

from celery import Celery, Task
from celery.signals import celeryd_init, task_postrun, task_prerun, worker_process_init

from rag_project import broker, heap, priority
from rag_project.lifecycle import process_started

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rag_project.settings.development")

broker.install()  # a worker survives Redis going away (see rag_project/broker.py)
app = Celery("rag_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)


@celeryd_init.connect
def _lower_priority(**kwargs) -> None:
    """``WORKER_NICE``: the worker yields the CPU to the web processes it shares it with (a
    prefork pool's children inherit it; ``rag_project.priority``)."""
    from django.conf import settings

    priority.lower_own(settings.WORKER_NICE)


@worker_process_init.connect
def _worker_process_started(**kwargs) -> None:
    """A prefork worker's child is about to take tasks: warm it (rag_project.lifecycle)."""
    process_started.send(sender="worker")


def _close_old_connections(task) -> None:
    """What Django does around a request, around a task: a connection past ``CONN_MAX_AGE``,
    left broken by an error or with autocommit changed is closed (the next query opens a new
    one); a healthy one is kept (``CELERY_DB_REUSE_MAX`` keeps Celery from closing it every
    time). Not for a task run inline (``task_always_eager``): it runs inside its caller's
    request or transaction, whose connection is the caller's to manage."""
    if task is None or getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@task_prerun.connect
def _task_starting(task=None, **kwargs) -> None:
    _close_old_connections(task)


@task_postrun.connect
def _task_done(task=None, **kwargs) -> None:
    """Between tasks: old database connections closed (above), and the heap frozen if a slow
    full collection asked for it (rag_project.heap)."""
    _close_old_connections(task)
    heap.freeze_if_due()


# A broker hiccup is retried briefly; a broker that is down is not waited for by a request.
RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.2}


def enqueue(
    task: Task | str,
    *args,
    countdown: float | None = None,
    fold: tuple[str, float] | None = None,
    **kwargs,
) -> None:
    """Queue ``task(*args, **kwargs)`` once the current transaction commits (at once outside
    one), so a task never runs before the data it needs is visible and a rolled-back change
    queues nothing.

    ``task``: a task, or the name it is registered under (``"knowledge.process_document"``),
    so that the services a tasks module calls can queue its tasks without importing it. A name
    no task is registered under raises LookupError here, in the caller (``registered_task``).

    ``fold``: (cache key, seconds). Queue only when no task queued under that key is still
    waiting: the key is set when one is queued and the task clears it (``unfold``) before it
    reads anything, so it sees every change that was folded into it, and a change after that
    queues its own. The key expires after the seconds given, so a lost task holds later ones
    back no longer than that. Redis unreachable: the task is queued (one too many is harmless).

    A broker that cannot be reached is logged, never raised: the change that asked for the task
    has committed and must stand. Nothing is lost, because every task's work is also found by a
    periodic reaper (Celery beat): pending documents, re-analysis and re-embedding by
    ``knowledge.services.upkeep``, BM25 warming and calibration by ``retrieval.changes``.
    """

    if isinstance(task, str):
        task = registered_task(task)

    def send() -> None:
        if fold is not None and not _first_to_fold(*fold):
            return  # a task queued and not started yet will see this change
        try:
            task.apply_async(
                args, kwargs, countdown=countdown, retry=True, retry_policy=RETRY_POLICY
            )
        except Exception as exc:  # broker down: the reaper finds the work later
            logger.warning(
                "could not queue %s%r (%s); the periodic reaper will pick the work up",
                task.name,
                args,
                exc,
            )

    from django.db import transaction

    transaction.on_commit(send, robust=True)


_discovering = threading.Lock()


def registered_task(name: str) -> Task:
    """The task registered under ``name``. The apps' tasks modules are imported the first time
    a name is not found (a web process imports none of them otherwise); LookupError, naming
    it, when no task has that name: a misspelt name fails where it is queued, and never
    queues a message no worker runs. Threads of one process discover one at a time: a thread
    that looked while another was importing the modules would see only some of their tasks."""
    if name not in app.tasks:
        with _discovering:
            if name not in app.tasks:
                app.autodiscover_tasks(force=True)
    try:
        return app.tasks[name]
    except KeyError:
        raise LookupError(f"no Celery task is registered as {name!r}") from None


def _first_to_fold(key: str, seconds: float) -> bool:
    from django.core.cache import cache

    try:
        return cache.add(key, 1, timeout=seconds)
    except Exception as exc:  # Redis down: queue anyway
        logger.warning("could not fold the task under %s (%s); queuing it", key, exc)
        return True


def unfold(key: str) -> None:
    """Called by a task queued with ``enqueue(..., fold=(key, ...))`` as it starts: changes from
    now on need a task after this one, so they queue their own."""
    from django.core.cache import cache

    try:
        cache.delete(key)
    except Exception as exc:
        logger.warning("could not clear %s (%s)", key, exc)


def waiting_tasks(queue: str | None = None) -> int:
    """Messages waiting on ``queue`` (the default queue), not yet taken by a worker."""
    from django.conf import settings

    with app.connection_for_read() as conn:
        name = queue or settings.CELERY_TASK_DEFAULT_QUEUE
        return conn.default_channel.queue_declare(name).message_count
