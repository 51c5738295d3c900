"""``python manage.py calibrate --tenant T --kb KB``: measure both legs of a knowledge base on
pseudo-queries cut from its own chunks and store the fusion weights it should use."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from knowledge.models import KnowledgeBase
from retrieval.calibration import calibrate
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Calibrate a knowledge base's fusion weights (label-free)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--kb", required=True, help="knowledge base name")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, tenant, kb, json, **options) -> None:
        kb_obj = KnowledgeBase.objects.filter(tenant__name=tenant, name=kb).first()
        if kb_obj is None:
            raise CommandError(f"no knowledge base {kb!r} in tenant {tenant!r}")
        result = calibrate(Tenant.objects.get(pk=kb_obj.tenant_id), kb_obj)
        if json:
            self.stdout.write(_dumps(result.to_dict()))
            return
        self.stdout.write(
            f"vector weight {result.vector_weight}, keyword weight {result.keyword_weight} "
            f"({result.rule}; MRR vector {result.vector_mrr}, keyword {result.keyword_mrr}, "
            f"{result.queries} pseudo-queries over {result.chunks} chunks)"
        )


def _dumps(data: dict) -> str:
    return json.dumps(data)
