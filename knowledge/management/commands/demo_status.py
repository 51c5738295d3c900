"""``python manage.py demo_status``: how far the demo knowledge base's documents are, as one JSON
object, ``{"knowledge_base": 1, "documents": 5, "ready": 3, "failed": 0}``, or ``{}`` when there
is no demo knowledge base (``seed_demo`` makes it). ``make run`` asks it to say when the demo can
be searched."""

import json

from django.core.management.base import BaseCommand

from knowledge.management.commands.seed_demo import DEMO_KB, DEMO_TENANT
from knowledge.models import Document, KnowledgeBase


class Command(BaseCommand):
    help = "Print the demo knowledge base's processing state as JSON ({} without a demo)."

    def handle(self, *args, **options) -> str:
        return json.dumps(demo_status())


def demo_status() -> dict[str, int]:
    kb = KnowledgeBase.objects.filter(tenant__name=DEMO_TENANT, name=DEMO_KB).first()
    if kb is None:
        return {}
    statuses = list(Document.objects.filter(knowledge_base=kb).values_list("status", flat=True))
    return {
        "knowledge_base": kb.pk,
        "documents": len(statuses),
        "ready": statuses.count(Document.Status.READY),
        "failed": statuses.count(Document.Status.FAILED),
    }
