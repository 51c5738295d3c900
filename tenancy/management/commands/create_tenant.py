"""``python manage.py create_tenant NAME [--owner USERNAME]``: a tenant (idempotent), and
optionally an existing user as its owner."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from tenancy.models import Membership, Tenant
from tenancy.services import get_or_create_tenant, set_membership


class Command(BaseCommand):
    help = "Create a tenant (or keep the existing one of that name), optionally with an owner."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="tenant name")
        parser.add_argument(
            "--owner", metavar="USERNAME", help="an existing user, made the tenant's owner"
        )

    def handle(self, *args, name: str, owner: str | None, **options) -> None:
        user = None
        if owner:
            user = get_user_model().objects.filter(username=owner).first()
            if user is None:
                raise CommandError(
                    f"no user {owner!r}; create it first (manage.py createsuperuser)"
                )
        existed = Tenant.objects.filter(name=name).exists()
        tenant = get_or_create_tenant(name)
        verb = "exists" if existed else "created"
        self.stdout.write(f"tenant {tenant.name!r} (slug {tenant.slug}) {verb}")
        if user is not None:
            set_membership(tenant=tenant, user=user, role=Membership.Role.OWNER)
            self.stdout.write(f"{user.get_username()!r} is its owner")
