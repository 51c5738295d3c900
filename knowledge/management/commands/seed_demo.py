"""``python manage.py seed_demo``: the demo tenant, its admin user and a demo knowledge base
loaded from the sample documents in ``knowledge/demo/`` (English and Chinese).

Idempotent: running it again keeps the data and the password, and skips documents already in
the knowledge base. The admin password comes from ``RAG_DEMO_PASSWORD`` or is generated and
printed once, on the run that creates the user. Documents are queued for the Celery worker
(``make run`` starts one); ``--sync`` processes them in this process instead.
"""

import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from tenancy.models import Membership, Tenant

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"

DEMO_TENANT = "Demo"
DEMO_KB = "Demo knowledge base"


class Command(BaseCommand):
    help = "Create the demo tenant, admin user and knowledge base (idempotent)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sync", action="store_true", help="process documents here")

    def handle(self, *args, sync: bool = False, **options) -> None:
        username = os.environ.get("RAG_DEMO_USER", "admin")
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(name=DEMO_TENANT, defaults={"slug": "demo"})
            user_model = get_user_model()
            user = user_model.objects.filter(username=username).first()
            password = None
            if user is None:
                password = os.environ.get("RAG_DEMO_PASSWORD") or secrets.token_urlsafe(12)
                user = user_model.objects.create_superuser(
                    username, f"{username}@example.com", password
                )
            Membership.objects.get_or_create(
                user=user, tenant=tenant, defaults={"role": Membership.Role.OWNER}
            )
            kb = KnowledgeBase.objects.filter(tenant=tenant, name=DEMO_KB).first()
            if kb is None:
                kb = create_knowledge_base(
                    tenant=tenant,
                    name=DEMO_KB,
                    description="Sample English and Chinese documents from the repository.",
                )
        if password is not None:
            shown = "(from RAG_DEMO_PASSWORD)" if os.environ.get("RAG_DEMO_PASSWORD") else password
            self.stdout.write(
                self.style.WARNING(
                    f"demo admin created: user {username!r} password {shown}  (shown once)"
                )
            )
        else:
            self.stdout.write(f"demo admin {username!r} exists; its password is unchanged")
        self.stdout.write(f"demo tenant {tenant.name!r}, knowledge base {kb.name!r} (id {kb.id})")
        added = self._load_documents(tenant, kb, sync)
        if added:
            how = "processed" if sync else "queued for the worker"
            self.stdout.write(f"{len(added)} demo documents {how}")

    def _load_documents(self, tenant: Tenant, kb: KnowledgeBase, sync: bool) -> list[Document]:
        known = set(
            Document.objects.filter(knowledge_base=kb).values_list("original_filename", flat=True)
        )
        added = []
        for path in sorted(DEMO_DIR.iterdir()):
            if path.name in known:
                continue
            with path.open("rb") as stream:
                document = create_document(
                    tenant=tenant,
                    knowledge_base=kb,
                    name=path.name,
                    stream=stream,
                    metadata={"source": "demo"},
                    queue=not sync,
                )
            if sync:
                process_document(document.pk)
            added.append(document)
        return added
