"""The admin's authorization matrix: every page, view, form and action of every model, asked by
each role in the object's own tenant and by a user who has no role there but is owner of
another tenant. What is asked of the role table decides, never "may read somewhere":

- no role in the object's tenant: not found (404), or the object absent from a list, and no
  effect, whatever the user may do in their own tenant;
- a role that lacks the operation's permission: 403 and no effect;
- a role that has it, and a superuser: the page answers (200 or a redirect) and the effect
  happens.

Every user here except the stranger is owner of tenant B as well, so "may do this somewhere"
is always true for them: each cell of the matrix can only pass by the role in tenant A.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from django.urls import reverse

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.web.models import WebSource
from knowledge.web.sources import create_web_source
from retrieval.models import BM25Manifest, BM25Segment
from retrieval.search import RAGService
from tenancy.models import ApiKey, Membership, Tenant
from tenancy.roles import Permission, role_permissions
from tenancy.services import create_api_key
from tests.admin.conftest import MANUALS, staff
from tests.factories import TenantFactory, UserFactory, add_document

pytestmark = pytest.mark.django_db

P = Permission
SUPERUSER_ONLY = None  # an operation no member role allows (tenants are changed by superusers)
ROLES = ["stranger", *Membership.Role.values, "superuser"]


@dataclass
class Target:
    """Tenant A's objects (the ones asked about) and tenant B, everyone's other tenant."""

    tenant: Tenant
    other: Tenant
    kb: KnowledgeBase
    doc: Document
    failed_doc: Document
    chunk: Chunk
    source: WebSource
    key: ApiKey
    manifest: BM25Manifest
    segment: BM25Segment


@dataclass(frozen=True)
class Op:
    """One request about tenant A's objects. ``need`` is what it asks of the role table in
    tenant A (SUPERUSER_ONLY: nothing a member has). ``done`` says whether its effect
    happened; ``listed`` ops are lists: the answer is 200 for all, the object shown or not."""

    name: str
    need: Permission | None
    request: Callable[[Client, Target], object]
    done: Callable[[Target], bool] | None = None
    listed: Callable[[Target], str] | None = None
    setup: Callable[[Target], None] = field(default=lambda t: None)
    # an add form: a user who may add elsewhere gets the form back with "Select a valid
    # choice" (200) for tenant A, a refusal since nothing was made
    form_refusal: bool = False
    # what it takes to see the object at all: without it, a member is refused as a stranger
    # is (404), since the object is not among what they can see
    sees: Permission = P.READ


def admin_url(name: str, *args) -> str:
    return reverse(f"admin:{name}", args=args)


def action(changelist: str, name: str, pk: Callable[[Target], int]):
    def post(client: Client, t: Target):
        data = {"action": name, "_selected_action": [pk(t)], "post": "yes"}
        return client.post(admin_url(changelist), data)

    return post


def get(name: str, pk: Callable[[Target], int], query: str = ""):
    return lambda client, t: client.get(admin_url(name, pk(t)) + query)


def post(name: str, pk: Callable[[Target], int], data: Callable[[Target], dict] | None = None):
    return lambda client, t: client.post(admin_url(name, pk(t)), data(t) if data else {})


def gone(model, pk: Callable[[Target], int]) -> Callable[[Target], bool]:
    return lambda t: not model.objects.filter(pk=pk(t)).exists()


def kb_pk(t: Target) -> int:
    return t.kb.pk


def doc_pk(t: Target) -> int:
    return t.doc.pk


def chunk_pk(t: Target) -> int:
    return t.chunk.pk


def source_pk(t: Target) -> int:
    return t.source.pk


def key_pk(t: Target) -> int:
    return t.key.pk


def tenant_pk(t: Target) -> int:
    return t.tenant.pk


def change_link(name: str, pk: Callable[[Target], int]) -> Callable[[Target], str]:
    return lambda t: admin_url(f"{name}_change", pk(t))


def kb_form(t: Target) -> dict:
    return {
        "name": "Renamed",
        "description": "",
        "chunk_size": 1500,
        "chunk_overlap": 150,
        "user_words": "",
        "weight_mode": "fixed",
        "vector_weight": 0.6,
        "keyword_weight": 0.4,
        "top_k": 5,
        "candidate_multiplier": 3,
        "score_threshold": "",
        "rerank_top_n": 20,
    }


def source_form(t: Target, name: str = "Renamed source") -> dict:
    return {
        "knowledge_base": t.kb.pk,
        "name": name,
        "start_url": "https://help.example.com/",
        "sitemap_url": "",
        "include_prefixes": "",
        "exclude_prefixes": "",
        "follow_links": "on",
        "max_pages": 100,
        "max_depth": 3,
        "max_page_bytes": 1_000_000,
        "max_total_bytes": 10_000_000,
        "time_budget_s": 600,
        "sync_interval_s": 86400,
    }


def upload(client: Client, t: Target):
    planted = SimpleUploadedFile("planted.txt", b"Planted text about the TH01 sensor.")
    return client.post(admin_url("knowledge_knowledgebase_upload", t.kb.pk), {"files": [planted]})


def disabled(t: Target) -> None:
    Document.objects.filter(pk=t.doc.pk).update(enabled=False)
    Chunk.objects.filter(pk=t.chunk.pk).update(enabled=False)


def doc_state(t: Target) -> Document:
    return Document.objects.get(pk=t.doc.pk)


CL = {
    "kb": "knowledge_knowledgebase_changelist",
    "doc": "knowledge_document_changelist",
    "chunk": "knowledge_chunk_changelist",
    "source": "knowledge_websource_changelist",
    "key": "tenancy_apikey_changelist",
    "tenant": "tenancy_tenant_changelist",
}


def changelist(name: str):
    return lambda client, t: client.get(admin_url(name))


OPS = [
    # knowledge bases
    Op(
        "kb list",
        P.READ,
        changelist(CL["kb"]),
        listed=change_link("knowledge_knowledgebase", kb_pk),
    ),
    Op("kb page", P.READ, get("knowledge_knowledgebase_change", kb_pk)),
    Op("kb history", P.READ, get("knowledge_knowledgebase_history", kb_pk)),
    Op(
        "kb save",
        P.MANAGE_KNOWLEDGE_BASES,
        post("knowledge_knowledgebase_change", kb_pk, kb_form),
        done=lambda t: KnowledgeBase.objects.get(pk=t.kb.pk).name == "Renamed",
    ),
    Op(
        "kb add",
        P.MANAGE_KNOWLEDGE_BASES,
        lambda c, t: c.post(
            admin_url("knowledge_knowledgebase_add"),
            {**kb_form(t), "tenant": t.tenant.pk, "name": "Planted"},
        ),
        done=lambda t: KnowledgeBase.objects.filter(tenant=t.tenant, name="Planted").exists(),
        form_refusal=True,
    ),
    Op("kb delete page", P.MANAGE_KNOWLEDGE_BASES, get("knowledge_knowledgebase_delete", kb_pk)),
    Op(
        "kb delete",
        P.MANAGE_KNOWLEDGE_BASES,
        post("knowledge_knowledgebase_delete", kb_pk, lambda t: {"post": "yes"}),
        done=gone(KnowledgeBase, kb_pk),
    ),
    Op(
        "kb delete_selected",
        P.MANAGE_KNOWLEDGE_BASES,
        action(CL["kb"], "delete_selected", kb_pk),
        done=gone(KnowledgeBase, kb_pk),
    ),
    Op(
        "kb retry_failed",
        P.WRITE_DOCUMENTS,
        action(CL["kb"], "retry_failed", kb_pk),
        done=lambda t: Document.objects.get(pk=t.failed_doc.pk).status != "failed",
    ),
    Op("kb upload page", P.WRITE_DOCUMENTS, get("knowledge_knowledgebase_upload", kb_pk)),
    Op(
        "kb upload",
        P.WRITE_DOCUMENTS,
        upload,
        done=lambda t: Document.objects.filter(knowledge_base=t.kb, title="planted").exists(),
    ),
    Op("kb reembed page", P.MANAGE_KNOWLEDGE_BASES, get("knowledge_knowledgebase_reembed", kb_pk)),
    Op(
        "kb reembed",
        P.MANAGE_KNOWLEDGE_BASES,
        post(
            "knowledge_knowledgebase_reembed",
            kb_pk,
            lambda t: {"provider": "hash", "dimensions": 16},
        ),
        done=lambda t: bool(KnowledgeBase.objects.get(pk=t.kb.pk).embedding_migration),
    ),
    Op(
        "kb hit testing",
        P.READ,
        get("knowledge_knowledgebase_hit_testing", kb_pk, "?q=TH01"),
    ),
    Op(
        "kb rebuild index",
        P.MANAGE_KNOWLEDGE_BASES,
        post("knowledge_knowledgebase_rebuild_index", kb_pk),
    ),
    Op("kb calibrate", P.MANAGE_KNOWLEDGE_BASES, post("knowledge_knowledgebase_calibrate", kb_pk)),
    # documents
    Op(
        "doc list",
        P.READ,
        changelist(CL["doc"]),
        listed=change_link("knowledge_document", doc_pk),
    ),
    Op(
        "doc status",
        P.READ,
        lambda c, t: c.get(admin_url("knowledge_document_status") + f"?ids={t.doc.pk}"),
        listed=lambda t: f'"{t.doc.pk}"',
    ),
    Op("doc page", P.READ, get("knowledge_document_change", doc_pk)),
    Op("doc file", P.READ, get("knowledge_document_file", doc_pk)),
    Op("doc delete page", P.WRITE_DOCUMENTS, get("knowledge_document_delete", doc_pk)),
    Op(
        "doc delete",
        P.WRITE_DOCUMENTS,
        post("knowledge_document_delete", doc_pk, lambda t: {"post": "yes"}),
        done=gone(Document, doc_pk),
    ),
    Op(
        "doc delete_selected",
        P.WRITE_DOCUMENTS,
        action(CL["doc"], "delete_selected", doc_pk),
        done=lambda t: doc_state(t).delete_requested_at is not None,
    ),
    Op(
        "doc reprocess",
        P.WRITE_DOCUMENTS,
        post("knowledge_document_reprocess", doc_pk),
        done=lambda t: doc_state(t).status != "ready",
    ),
    Op(
        "doc reprocess_selected",
        P.WRITE_DOCUMENTS,
        action(CL["doc"], "reprocess_selected", doc_pk),
        done=lambda t: doc_state(t).status != "ready",
    ),
    Op(
        "doc disable",
        P.WRITE_DOCUMENTS,
        post("knowledge_document_enabled", doc_pk, lambda t: {"enabled": "0"}),
        done=lambda t: not doc_state(t).enabled,
    ),
    Op(
        "doc disable_selected",
        P.WRITE_DOCUMENTS,
        action(CL["doc"], "disable_selected", doc_pk),
        done=lambda t: not doc_state(t).enabled,
    ),
    Op(
        "doc enable_selected",
        P.WRITE_DOCUMENTS,
        action(CL["doc"], "enable_selected", doc_pk),
        done=lambda t: doc_state(t).enabled,
        setup=disabled,
    ),
    Op(
        "doc add chunk",
        P.WRITE_DOCUMENTS,
        post("knowledge_document_add_chunk", doc_pk, lambda t: {"content": "Planted chunk."}),
        done=lambda t: Chunk.objects.filter(document=t.doc, content="Planted chunk.").exists(),
    ),
    # chunks
    Op(
        "chunk list",
        P.READ,
        changelist(CL["chunk"]),
        listed=change_link("knowledge_chunk", chunk_pk),
    ),
    Op("chunk page", P.READ, get("knowledge_chunk_change", chunk_pk)),
    Op(
        "chunk curate",
        P.WRITE_DOCUMENTS,
        post("knowledge_chunk_curate", chunk_pk, lambda t: {"content": "Planted text."}),
        done=lambda t: Chunk.objects.get(pk=t.chunk.pk).content == "Planted text.",
    ),
    Op(
        "chunk disable_selected",
        P.WRITE_DOCUMENTS,
        action(CL["chunk"], "disable_selected", chunk_pk),
        done=lambda t: not Chunk.objects.get(pk=t.chunk.pk).enabled,
    ),
    Op(
        "chunk enable_selected",
        P.WRITE_DOCUMENTS,
        action(CL["chunk"], "enable_selected", chunk_pk),
        done=lambda t: Chunk.objects.get(pk=t.chunk.pk).enabled,
        setup=disabled,
    ),
    # web sources
    Op(
        "source list",
        P.READ,
        changelist(CL["source"]),
        listed=change_link("knowledge_websource", source_pk),
    ),
    Op("source page", P.READ, get("knowledge_websource_change", source_pk)),
    Op(
        "source save",
        P.WRITE_DOCUMENTS,
        post("knowledge_websource_change", source_pk, source_form),
        done=lambda t: WebSource.objects.get(pk=t.source.pk).name == "Renamed source",
    ),
    Op(
        "source add",
        P.WRITE_DOCUMENTS,
        lambda c, t: c.post(admin_url("knowledge_websource_add"), source_form(t, "Planted")),
        done=lambda t: WebSource.objects.filter(name="Planted").exists(),
        form_refusal=True,
    ),
    Op(
        "source delete",
        P.WRITE_DOCUMENTS,
        post("knowledge_websource_delete", source_pk, lambda t: {"post": "yes"}),
        done=gone(WebSource, source_pk),
    ),
    Op(
        "source delete_selected",
        P.WRITE_DOCUMENTS,
        action(CL["source"], "delete_selected", source_pk),
        done=gone(WebSource, source_pk),
    ),
    Op(
        "source sync_now",
        P.WRITE_DOCUMENTS,
        action(CL["source"], "sync_now", source_pk),
        done=lambda t: WebSource.objects.get(pk=t.source.pk).sync_status == "queued",
    ),
    # API keys: key managers only, as in the REST API
    Op(
        "key list",
        P.MANAGE_API_KEYS,
        changelist(CL["key"]),
        listed=change_link("tenancy_apikey", key_pk),
    ),
    Op(
        "key page",
        P.MANAGE_API_KEYS,
        get("tenancy_apikey_change", key_pk),
        sees=P.MANAGE_API_KEYS,
    ),
    Op(
        "key add",
        P.MANAGE_API_KEYS,
        lambda c, t: c.post(
            admin_url("tenancy_apikey_add"),
            {"tenant": t.tenant.pk, "name": "Planted", "scopes": ["read"]},
        ),
        done=lambda t: ApiKey.objects.filter(tenant=t.tenant, name="Planted").exists(),
        form_refusal=True,
    ),
    Op(
        "key revoke_selected",
        P.MANAGE_API_KEYS,
        action(CL["key"], "revoke_selected", key_pk),
        done=lambda t: ApiKey.objects.get(pk=t.key.pk).revoked_at is not None,
        sees=P.MANAGE_API_KEYS,
    ),
    # tenants: members see their own; only superusers change them
    Op(
        "tenant list",
        P.READ,
        changelist(CL["tenant"]),
        listed=change_link("tenancy_tenant", tenant_pk),
    ),
    Op("tenant page", P.READ, get("tenancy_tenant_change", tenant_pk)),
    Op(
        "tenant save",
        SUPERUSER_ONLY,
        post(
            "tenancy_tenant_change",
            tenant_pk,
            lambda t: {
                "name": "Taken",
                "slug": t.tenant.slug,
                "memberships-TOTAL_FORMS": 0,
                "memberships-INITIAL_FORMS": 0,
            },
        ),
        done=lambda t: Tenant.objects.get(pk=t.tenant.pk).name == "Taken",
    ),
    Op("tenant delete page", SUPERUSER_ONLY, get("tenancy_tenant_delete", tenant_pk)),
    # the BM25 index's rows (read-only)
    Op(
        "manifest list",
        P.READ,
        changelist("retrieval_bm25manifest_changelist"),
        listed=lambda t: admin_url("retrieval_bm25manifest_change", t.manifest.pk),
    ),
    Op("manifest page", P.READ, get("retrieval_bm25manifest_change", lambda t: t.manifest.pk)),
    Op(
        "segment list",
        P.READ,
        changelist("retrieval_bm25segment_changelist"),
        listed=lambda t: admin_url("retrieval_bm25segment_change", t.segment.pk),
    ),
    Op("segment page", P.READ, get("retrieval_bm25segment_change", lambda t: t.segment.pk)),
]


@pytest.fixture
def target(db, eager_tasks) -> Target:
    tenant, other = TenantFactory(name="Acme"), TenantFactory(name="Bolt")
    hashing = EmbeddingConfig(provider="hash", dimensions=32)
    kb = create_knowledge_base(tenant=tenant, name="Acme manuals", embedding=hashing)
    create_knowledge_base(tenant=other, name="Bolt notes", embedding=hashing)
    doc = add_document(kb, "sensors.md", MANUALS["sensors.md"])
    failed = add_document(kb, "pumps.md", MANUALS["pumps.md"])
    Document.objects.filter(pk=failed.pk).update(status="failed", error="parser crashed")
    source = create_web_source(
        tenant=tenant, knowledge_base=kb, start_url="https://help.example.com/", sync=False
    )
    key, _ = create_api_key(tenant=tenant, name="Acme reader")
    with eager_tasks():
        RAGService(tenant).search("sensor", kb.pk)  # the BM25 rows (L3)
    return Target(
        tenant=tenant,
        other=other,
        kb=kb,
        doc=doc,
        failed_doc=failed,
        chunk=Chunk.objects.filter(document=doc).order_by("position").first(),
        source=source,
        key=key,
        manifest=BM25Manifest.objects.get(knowledge_base=kb),
        segment=BM25Segment.objects.filter(knowledge_base=kb).first(),
    )


def user_for(role: str, t: Target):
    """A staff user with ``role`` in tenant A who is owner of tenant B; the stranger is owner
    of tenant B only."""
    if role == "superuser":
        return UserFactory(is_staff=True, is_superuser=True)
    user = staff(t.other)
    if role != "stranger":
        Membership.objects.create(user=user, tenant=t.tenant, role=role)
    return user


def allows(role: str, need: Permission | None) -> bool:
    if role == "superuser":
        return True
    if role == "stranger" or need is None:
        return False
    return need in role_permissions(role)


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_every_admin_operation_decides_by_the_role_in_the_objects_own_tenant(op, target):
    outcomes = {}
    for role in ROLES:
        with transaction.atomic():  # each role asks of the same, untouched objects
            op.setup(target)
            client = Client()
            client.force_login(user_for(role, target))
            response = op.request(client, target)
            outcomes[role] = outcome(op, role, target, response)
            transaction.set_rollback(True)
    expected = {role: "allowed" if allows(role, op.need) else "refused" for role in ROLES}
    assert outcomes == expected


def outcome(op: Op, role: str, t: Target, response) -> str:
    """ "allowed" or "refused", after checking that the answer is of its kind: a refusal is a
    404 for a stranger and a 403 for a member (or, on a list, the object absent), and does
    nothing; an allowed request answers and does its work."""
    status = response.status_code
    if op.listed is not None:
        assert status == 200, (op.name, role, status)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        return "allowed" if op.listed(t) in body.decode() else "refused"
    effect = op.done(t) if op.done is not None else None
    answered = status in (200, 302)
    if answered and (effect if op.done is not None else True):
        return "allowed"
    refused = {403} if allows(role, op.sees) else {404}
    if op.form_refusal:  # a user may add in tenant B: the form answers, refusing tenant A
        refused = {200, 403}
    assert status in refused, (op.name, role, status)
    assert not effect, (op.name, role, "refused, yet it happened")
    return "refused"


def test_an_admin_elsewhere_and_viewer_here_cannot_delete_by_the_list_action(target):
    """The finding this matrix was written for: "delete selected" on the knowledge-base list
    by a user who is admin in another tenant and only a viewer in the knowledge base's."""
    user = UserFactory(is_staff=True)
    Membership.objects.create(user=user, tenant=target.other, role=Membership.Role.ADMIN)
    Membership.objects.create(user=user, tenant=target.tenant, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(user)
    selected = {"action": "delete_selected", "_selected_action": [target.kb.pk], "post": "yes"}
    response = client.post(admin_url(CL["kb"]), selected)
    assert response.status_code == 403
    assert KnowledgeBase.objects.filter(pk=target.kb.pk).exists()
    # without "post" (the confirmation page) it is refused the same way
    del selected["post"]
    assert client.post(admin_url(CL["kb"]), selected).status_code == 403


def test_a_selection_mixing_tenants_is_refused_whole(target):
    """All or nothing: a selection with one object the user may not delete deletes none."""
    user = staff(target.other)
    Membership.objects.create(user=user, tenant=target.tenant, role=Membership.Role.VIEWER)
    theirs = KnowledgeBase.objects.get(tenant=target.other)
    client = Client()
    client.force_login(user)
    selected = {
        "action": "delete_selected",
        "_selected_action": [theirs.pk, target.kb.pk],
        "post": "yes",
    }
    assert client.post(admin_url(CL["kb"]), selected).status_code == 403
    assert KnowledgeBase.objects.filter(pk__in=[theirs.pk, target.kb.pk]).count() == 2
    # "select all" across the list is judged the same way
    across = {"action": "delete_selected", "select_across": "1", "index": 0, "post": "yes"}
    across["_selected_action"] = [theirs.pk]
    assert client.post(admin_url(CL["kb"]), across).status_code == 403
    assert KnowledgeBase.objects.filter(pk__in=[theirs.pk, target.kb.pk]).count() == 2


@pytest.mark.parametrize("selected", ["999999999", "abc", "1e9", "-1", ""])
def test_selected_ids_that_name_nothing_are_not_found(target, selected):
    client = Client()
    client.force_login(staff(target.tenant))
    response = client.post(
        admin_url(CL["doc"]),
        {"action": "delete_selected", "_selected_action": [selected], "post": "yes"},
    )
    assert response.status_code == 404
    assert Document.objects.filter(pk=target.doc.pk, delete_requested_at__isnull=True).exists()
