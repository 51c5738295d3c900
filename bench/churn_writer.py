"""The process that changes ``bench churn``'s knowledge base: one upload and one deletion every
1/R seconds, through the same services the API calls (``create_document``, ``delete_document``).

It runs apart from the searching clients, as a deployment's uploads come from other programs:
the clients' process only searches and times its searches, its interpreter lock is never held
by an upload or a deletion while a client thread waits to take its answer, and the writer's CPU
is reported on its own.

Protocol (``bench.churn._writer`` starts it, ``_Run._churn`` speaks to it): started with
``python -m bench.churn_writer KB_ID SEED``, it loads Django, reads the knowledge base's
documents (the deletion victims, in a seeded order) and prints ``ready``. The line ``go SECONDS
INTERVAL`` on its standard input starts the churn: for every upload it prints ``uploaded
DOCUMENT_ID MARKER SECONDS`` (the marker is a word only that document holds; SECONDS: when
this change, the upload and its deletion, began, counted from ``go``), and at the end ``done
COUNT``; it exits at the end of its input (before ``go``: with nothing changed). Errors go to
standard error and end the process with a non-zero status.
"""

from __future__ import annotations

import io
import os
import sys
import time


def main(argv: list[str]) -> int:
    kb_id, seed = int(argv[0]), int(argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rag_project.settings.development")
    import django

    django.setup()
    import numpy as np

    from knowledge.models import Document, KnowledgeBase
    from knowledge.services.documents import create_document, delete_document

    kb = KnowledgeBase.objects.select_related("tenant").get(pk=kb_id)
    rng = np.random.default_rng([seed, 7])
    old = list(
        Document.objects.filter(knowledge_base=kb).order_by("id").values_list("id", flat=True)
    )
    victims = rng.permutation(old).tolist()
    say("ready")
    line = sys.stdin.readline()
    if not line:
        return 0
    _, seconds, interval = line.split()
    go = time.perf_counter()
    uploaded = 0
    end = go + float(seconds)
    next_at = go
    while next_at < end:
        began = time.perf_counter() - go
        marker = f"zqx{uploaded}k{rng.integers(10**9)}"
        text = f"# Churn report {uploaded}\n\nThe {marker} inspection found wear.\n"
        document = create_document(
            tenant=kb.tenant,
            knowledge_base=kb,
            name=f"churn-{uploaded}.md",
            stream=io.BytesIO(text.encode()),
        )
        say(f"uploaded {document.pk} {marker} {began:.4f}")
        if victims:
            victim = Document.objects.filter(pk=victims.pop()).first()
            if victim is not None:
                delete_document(tenant=kb.tenant, document=victim)
        uploaded += 1
        next_at += float(interval)
        time.sleep(max(0.0, next_at - time.perf_counter()))
    say(f"done {uploaded}")
    sys.stdin.read()  # alive until told (its CPU time is read after "done")
    return 0


def say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
