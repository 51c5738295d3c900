"""``python manage.py seed_demo``: the demo tenant, its admin user and a demo knowledge base.

Idempotent: running it again keeps the data and the password. The admin password comes from
``RAG_DEMO_PASSWORD`` or is generated and printed once, on the run that creates the user.
"""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from knowledge.models import KnowledgeBase, Membership, Tenant

DEMO_TENANT = "Demo"
DEMO_KB = "Demo knowledge base"


class Command(BaseCommand):
    help = "Create the demo tenant, admin user and knowledge base (idempotent)."

    def handle(self, *args, **options) -> None:
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
            kb, _ = KnowledgeBase.objects.get_or_create(
                tenant=tenant,
                name=DEMO_KB,
                defaults={
                    "description": "Sample English and Chinese documents from the repository."
                },
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
