"""Every write service refuses another tenant's object with NotYours (answered 404, like a
missing object) before it writes anything.

These guards are the last line behind the API's tenant-filtered lookups: an in-process caller
(admin, management commands, LangChain, a future endpoint) that hands a service the wrong
tenant's object must be stopped here. They must hold under ``python -O`` too, which strips
``assert`` statements: test_guards_optimized.py runs this module that way. So nothing here relies
on ``assert``: failures go through ``pytest.raises`` and ``pytest.fail``. One test per function,
no parametrize: test_guards_optimized.py checks the -O run passed exactly these.
"""

from __future__ import annotations

import io
import os
import sys

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase, StagedEmbedding
from knowledge.services.documents import create_document, delete_document, reprocess_document
from knowledge.services.knowledge_bases import (
    change_embedding,
    create_knowledge_base,
    delete_knowledge_base,
    set_user_words,
    update_knowledge_base,
)
from tenancy.errors import ErrorKind, NotYours
from tenancy.models import ApiKey
from tenancy.services import InvalidKnowledgeBases, create_api_key, revoke_api_key
from tests.factories import add_document

pytestmark = pytest.mark.django_db


def test_runs_optimized_when_asked_to():
    """test_guards_optimized.py sets EXPECT_OPTIMIZED: the run then proves nothing unless
    asserts really are stripped."""
    if os.environ.get("EXPECT_OPTIMIZED") and sys.flags.optimize == 0:
        pytest.fail("EXPECT_OPTIMIZED is set but Python runs without -O")


@pytest.fixture
def theirs(other_tenant):
    """Another tenant's knowledge base with a processed document and an API key."""
    kb = create_knowledge_base(
        tenant=other_tenant,
        name="Their manuals",
        embedding=EmbeddingConfig(provider="hash", dimensions=32),
        user_words=["P-100"],
    )
    document = add_document(kb, "pumps.md", "# Pumps\n\nThe P-100 pump moves cooling water.")
    key, _ = create_api_key(tenant=other_tenant, name="their key", knowledge_bases=[kb])
    return {"kb": kb, "document": document, "key": key, "tenant": other_tenant}


def snapshot(tenant) -> dict:
    """Everything of a tenant a write service could change, files included."""
    documents = Document.objects.filter(tenant=tenant).order_by("pk")
    return {
        "kbs": list(
            KnowledgeBase.objects.filter(tenant=tenant)
            .order_by("pk")
            .values_list(
                "pk",
                "name",
                "top_k",
                "user_words",
                "embedding_migration",
                "index_version",
                "updated_at",
            )
        ),
        "documents": list(
            documents.values_list(
                "pk", "status", "progress", "attempts", "analyzer_version", "updated_at"
            )
        ),
        "files": [(d.pk, d.file.name, d.file.storage.exists(d.file.name)) for d in documents],
        "chunks": list(
            Chunk.objects.filter(tenant=tenant).order_by("pk").values_list("pk", "content")
        ),
        "staged": StagedEmbedding.objects.filter(knowledge_base__tenant=tenant).count(),
        "keys": list(
            ApiKey.objects.filter(tenant=tenant)
            .order_by("pk")
            .values_list("pk", "name", "revoked_at", "scopes")
        ),
    }


def expect_unchanged(before: dict, tenant) -> None:
    after = snapshot(tenant)
    for part, rows in before.items():
        if after[part] != rows:
            pytest.fail(f"{part} of {tenant} changed: {rows!r} -> {after[part]!r}")


def expect_not_yours(call, *tenants) -> NotYours:
    """``call()`` raises NotYours (a 404 not_found) and leaves every given tenant as it was."""
    before = [snapshot(t) for t in tenants]
    with pytest.raises(NotYours) as raised:
        call()
    if raised.value.kind != ErrorKind.NOT_FOUND or raised.value.code != "not_found":
        pytest.fail(f"NotYours must answer as not_found, not {raised.value.kind}")
    for tenant, rows in zip(tenants, before, strict=True):
        expect_unchanged(rows, tenant)
    return raised.value


def test_uploading_into_another_tenants_knowledge_base_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: create_document(
            tenant=tenant,
            knowledge_base=theirs["kb"],
            name="injected.txt",
            stream=io.BytesIO(b"Injected text."),
            queue=False,
        ),
        tenant,
        theirs["tenant"],
    )


def test_reprocessing_another_tenants_document_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: reprocess_document(tenant=tenant, document=theirs["document"]),
        theirs["tenant"],
    )


def test_deleting_another_tenants_document_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: delete_document(tenant=tenant, document=theirs["document"]), theirs["tenant"]
    )


def test_changing_another_tenants_knowledge_base_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: update_knowledge_base(
            tenant=tenant,
            knowledge_base=theirs["kb"],
            changes={"name": "pwned", "top_k": 2},
            user_words=["pwned"],
        ),
        theirs["tenant"],
    )


def test_deleting_another_tenants_knowledge_base_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: delete_knowledge_base(tenant=tenant, knowledge_base=theirs["kb"]),
        theirs["tenant"],
    )


def test_setting_another_tenants_user_words_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: set_user_words(tenant=tenant, knowledge_base=theirs["kb"], words=["pwned"]),
        theirs["tenant"],
    )


def test_re_embedding_another_tenants_knowledge_base_is_refused(tenant, theirs):
    expect_not_yours(
        lambda: change_embedding(
            tenant=tenant,
            knowledge_base=theirs["kb"],
            config=EmbeddingConfig(provider="hash", dimensions=64),
        ),
        theirs["tenant"],
    )


def test_revoking_another_tenants_api_key_is_refused(tenant, theirs):
    expect_not_yours(lambda: revoke_api_key(tenant=tenant, api_key=theirs["key"]), theirs["tenant"])


def test_a_service_called_without_a_tenant_refuses_too(theirs):
    # tenant=None must not match an object whose tenant_id is somehow None either.
    expect_not_yours(lambda: revoke_api_key(tenant=None, api_key=theirs["key"]), theirs["tenant"])


def test_a_key_cannot_be_restricted_to_another_tenants_knowledge_base(tenant, theirs):
    mine = create_knowledge_base(
        tenant=tenant, name="Mine", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    before = snapshot(tenant), snapshot(theirs["tenant"])
    with pytest.raises(InvalidKnowledgeBases):
        create_api_key(tenant=tenant, name="sneaky", knowledge_bases=[mine, theirs["kb"]])
    expect_unchanged(before[0], tenant)
    expect_unchanged(before[1], theirs["tenant"])


def test_the_refused_object_is_still_usable_by_its_own_tenant(tenant, theirs):
    """The guard refuses the caller, not the object: its own tenant still revokes its key."""
    expect_not_yours(lambda: revoke_api_key(tenant=tenant, api_key=theirs["key"]))
    revoked = revoke_api_key(tenant=theirs["tenant"], api_key=theirs["key"])
    if revoked.revoked_at is None:
        pytest.fail("the owning tenant could not revoke its own key")


def test_a_refusal_answers_exactly_like_a_missing_object(tenant, theirs):
    """Through the API's error mapping, the 404 of a refused object and the 404 of a missing
    one are the same answer, so a caller learns nothing about the other tenant."""
    from tenancy.api.errors import describe, translate

    refusals = {
        Document: lambda: reprocess_document(tenant=tenant, document=theirs["document"]),
        KnowledgeBase: lambda: delete_knowledge_base(tenant=tenant, knowledge_base=theirs["kb"]),
        ApiKey: lambda: revoke_api_key(tenant=tenant, api_key=theirs["key"]),
    }
    for model, call in refusals.items():
        refused = translate(expect_not_yours(call))
        missing = translate(model.DoesNotExist())
        answers = [(e.status_code, describe(e)) for e in (refused, missing)]
        if answers[0] != answers[1] or answers[0][0] != 404:
            pytest.fail(f"{model.__name__}: refused {answers[0]} != missing {answers[1]}")
