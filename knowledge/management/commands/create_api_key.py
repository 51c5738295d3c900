"""``python manage.py create_api_key --tenant NAME [--scope read|write]... [--kb KB]...
[--name NAME]``: a tenant's API key. The key itself is the only thing printed on stdout (so
``KEY=$(manage.py create_api_key ...)`` works); it is shown this once, only its hash is stored.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from knowledge.models import KnowledgeBase
from tenancy.models import ApiKey, Tenant
from tenancy.services import create_api_key


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it (shown once)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant name or slug")
        parser.add_argument(
            "--scope",
            action="append",
            choices=ApiKey.Scope.values,
            help="read (list, search) and/or write (create, upload, delete); default: read",
        )
        parser.add_argument(
            "--kb",
            action="append",
            default=[],
            metavar="KB",
            help="restrict the key to this knowledge base (name or id; repeat for several)",
        )
        parser.add_argument("--name", help="a name for the key (default: cli-<timestamp>)")

    def handle(self, *args, tenant: str, scope, kb, name, **options) -> None:
        tenant_obj = Tenant.objects.filter(name=tenant).first() or (
            Tenant.objects.filter(slug=tenant).first()
        )
        if tenant_obj is None:
            raise CommandError(f"no tenant {tenant!r} (create it with create_tenant)")
        kbs = [self._kb(tenant_obj, ref) for ref in kb]
        name = name or f"cli-{timezone.now():%Y%m%d-%H%M%S-%f}"
        try:
            key, secret = create_api_key(
                tenant=tenant_obj,
                name=name,
                scopes=scope or [ApiKey.Scope.READ],
                knowledge_bases=kbs,
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        restriction = ", ".join(k.name for k in kbs) or "all knowledge bases"
        self.stderr.write(
            f"API key {key.name!r} ({key.prefix}) of tenant {tenant_obj.name!r}: scopes "
            f"{', '.join(key.scopes)}; {restriction}. Store it now: it is not shown again."
        )
        self.stdout.write(secret)

    def _kb(self, tenant: Tenant, ref: str) -> KnowledgeBase:
        found = KnowledgeBase.objects.filter(tenant=tenant, name=ref).first()
        if found is None and ref.isdigit():
            found = KnowledgeBase.objects.filter(tenant=tenant, pk=int(ref)).first()
        if found is None:
            raise CommandError(f"no knowledge base {ref!r} in tenant {tenant.name!r}")
        return found
