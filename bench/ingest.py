"""``bench ingest --docs N``: end-to-end ingestion throughput through real Celery workers.

N Markdown documents (headings and paragraphs of the mixed English/Chinese vocabulary of
``bench.corpus``, about 12,000 characters each) are uploaded into a throwaway
knowledge base with the ``hash`` embedder (384 dimensions) through ``create_document``, exactly
as the API stores an upload, and queued on commit. ``--workers`` Celery worker processes
(``--pool=solo``, the settings and environment of this command) are started first and stopped
at the end; the clock runs from the commit that queues the documents until the last one is
``ready``: parse, chunk, analyse, embed, store, plus the BM25 re-warm tasks that every stored
document triggers, as in production.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import Sum

from bench.corpus import Vocabulary
from bench.throwaway import throwaway_tenants
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Document
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base

REPO = Path(__file__).resolve().parents[1]
DOC_WORDS = 2000
START_CEILING_S = 300  # for the workers to start and answer a ping
DRAIN_CEILING_S = 600  # for them to run the tasks earlier work left on the queue


def add_ingest_arguments(parser) -> None:
    parser.add_argument("--docs", type=int, default=200, help="documents to ingest")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait at most")


def bench_ingest(options: dict[str, Any]) -> dict[str, Any]:
    n, workers = options["docs"], options["workers"]
    if n < 1 or workers < 1:
        raise CommandError("--docs and --workers must be at least 1")
    texts = documents(n, options["seed"])
    with _knowledge_base() as kb, _workers(workers):
        with transaction.atomic():
            for i, text in enumerate(texts):
                create_document(
                    tenant=kb.tenant,
                    knowledge_base=kb,
                    name=f"bench-{i}.md",
                    stream=io.BytesIO(text.encode()),
                )
            started = time.perf_counter()  # the tasks are queued as this block commits
        elapsed, statuses = _wait(kb, n, started, options["timeout"])
        chunks = Document.objects.filter(knowledge_base=kb).aggregate(n=Sum("chunk_count"))["n"]
    chunks = chunks or 0
    return {
        "docs": n,
        "workers": workers,
        "chunks": chunks,
        "seconds": round(elapsed, 2),
        "chunks_per_s": round(chunks / elapsed, 1),
        "docs_per_s": round(n / elapsed, 2),
        "bytes": sum(len(t.encode()) for t in texts),
        "failed": statuses.get(Document.Status.FAILED, 0),
    }


def documents(n: int, seed: int) -> list[str]:
    vocab = Vocabulary.build()
    rng = np.random.default_rng([seed, 3])
    texts = []
    for i in range(n):
        words = vocab.words[vocab.draw(rng, DOC_WORDS)].tolist()
        parts = [f"# Synthetic manual {i}\n"]
        for start in range(0, DOC_WORDS, 60):  # a paragraph of 60 words, a heading every 5
            if start % 300 == 0:
                parts.append(f"## Section {start // 300 + 1} {words[start]}\n")
            parts.append(" ".join(words[start : start + 60]) + ".\n")
        texts.append("\n".join(parts))
    return texts


@contextmanager
def _knowledge_base():
    with throwaway_tenants("ingest") as (tenant,):
        yield create_knowledge_base(
            tenant=tenant,
            name="ingest bench",
            embedding=EmbeddingConfig(provider="hash", dimensions=384),
            weight_mode="fixed",
        )


def child_environment() -> dict[str, str]:
    """The environment of a benchmark's own child process (a Celery worker, ``bench churn``'s
    writer): this one's, with this process's settings and database named, debug off."""
    env = dict(os.environ)
    # override_settings (tests) hides SETTINGS_MODULE; the environment always names it.
    env["DJANGO_SETTINGS_MODULE"] = (
        os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE
    )
    env["RAG_TEST_DB_NAME"] = connection.settings_dict["NAME"]  # read by the test profile only
    # Debug off, as a deployment's workers run (the development profile turns it on): with it,
    # every query goes through Django's debug cursor, which formats and keeps its SQL.
    env["DEBUG"] = "false"
    env["PYTHONPATH"] = str(REPO)
    return env


@contextmanager
def _workers(count: int):
    """Start ``count`` worker processes on this deployment's queue; stop them at the end."""
    from rag_project.celery import app

    prefix = f"bench-ingest-{os.getpid()}-{time.monotonic_ns()}"
    env = child_environment()
    command = [sys.executable, "-m", "celery", "-A", "rag_project", "worker", "--pool=solo"]
    command += ["--without-gossip", "--without-mingle", "-l", "warning"]
    command += ["-Q", settings.CELERY_TASK_DEFAULT_QUEUE]
    # stdout stays ours (--json prints one JSON object): the workers' banner goes nowhere,
    # their log lines still go to stderr.
    procs = [
        subprocess.Popen(
            [*command, "-n", f"{prefix}-{i}@%h"], cwd=REPO, env=env, stdout=subprocess.DEVNULL
        )
        for i in range(count)
    ]
    try:
        # A ceiling, not an expectation: workers that start in seconds on an idle machine can
        # take minutes on a loaded one; only a broken start should fail the run.
        deadline = time.monotonic() + START_CEILING_S
        while True:
            if any(p.poll() is not None for p in procs):
                raise CommandError("a Celery worker exited while starting")
            replies = app.control.ping(timeout=1.0) or []
            ours = {name for reply in replies for name in reply if name.startswith(prefix)}
            if len(ours) == count:
                break
            if time.monotonic() > deadline:
                raise CommandError(
                    f"the Celery workers did not answer a ping within {START_CEILING_S:g} s"
                )
        _drain()
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _drain() -> None:
    """Wait until the deployment's queue is empty: tasks earlier work left there (a
    ``manage.py evaluate`` run without a worker leaves one index build per document) would
    otherwise run inside the measurement. Says so on standard error; fails after
    ``DRAIN_CEILING_S``."""
    from rag_project.celery import waiting_tasks

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    left = first = waiting_tasks(queue)
    if not first:
        return
    sys.stderr.write(f"{first} tasks were waiting on queue {queue!r}; running them first\n")
    deadline = time.monotonic() + DRAIN_CEILING_S
    while left:
        if time.monotonic() > deadline:
            raise CommandError(
                f"{left} tasks still wait on queue {queue!r} after {DRAIN_CEILING_S} s. If "
                f"nothing needs them: celery -A rag_project purge -Q {queue}"
            )
        time.sleep(1.0)  # a poll of the queue's length, not a wait for luck
        left = waiting_tasks(queue)
        sys.stderr.write(f"\r{first - left}/{first} run")
    sys.stderr.write("\n")


def _wait(kb, n: int, started: float, timeout: float) -> tuple[float, dict[str, int]]:
    final = set(Document.Status.final())
    while True:
        statuses = dict(
            Document.objects.filter(knowledge_base=kb)
            .values_list("status")
            .annotate(n=Sum(1))
            .values_list("status", "n")
        )
        if sum(v for s, v in statuses.items() if s in final) >= n:
            return time.perf_counter() - started, statuses
        if time.perf_counter() - started > timeout:
            raise CommandError(f"ingestion did not finish within {timeout:g} s: {statuses}")
        time.sleep(0.1)


def ingest_table(r: dict[str, Any]) -> str:
    return (
        f"Ingestion: {r['docs']:,} documents ({r['bytes'] / 1e6:.1f} MB of Markdown), "
        f"{r['chunks']:,} chunks, {r['workers']} Celery workers, hash embeddings\n\n"
        f"{'wall time':20}{r['seconds']:>10.2f} s\n"
        f"{'chunks per second':20}{r['chunks_per_s']:>10.1f}\n"
        f"{'documents per second':20}{r['docs_per_s']:>10.2f}\n"
        f"{'failed documents':20}{r['failed']:>10}"
    )
