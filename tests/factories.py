"""factory_boy factories for the data model, and ready documents made through the real
services; tests build what they need with these."""

import io

import factory
from django.contrib.auth import get_user_model

from knowledge.models import Document, KnowledgeBase
from tenancy.models import Membership, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Membership.Role.OWNER


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = KnowledgeBase

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"Knowledge base {n}")


def add_document(kb: KnowledgeBase, name: str, content: str | bytes, **kwargs) -> Document:
    """Upload and process in this process through the services (no worker; they bump the
    knowledge base's version): the document is ready on return."""
    from knowledge.services.documents import create_document
    from knowledge.services.processing import process_document

    data = content.encode() if isinstance(content, str) else content
    document = create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name=name,
        stream=io.BytesIO(data),
        queue=False,
        **kwargs,
    )
    # Not an assert around the call: ``python -O`` (tests/tenancy/test_guards_optimized.py)
    # would strip the processing along with the check.
    status = process_document(document.pk)
    if status != Document.Status.READY:
        raise AssertionError(f"document {document.pk} ended {status}, not ready")
    document.refresh_from_db()
    return document
