"""Curation in the admin: edit a chunk's text, keywords and questions on its page, add a chunk
on the document page, disable/enable chunks and documents (one by one and as list actions,
shown with a badge), and reprocessing that asks before discarding hand edits."""

from __future__ import annotations

import pytest
from django.urls import reverse

from knowledge.models import Chunk, Document
from retrieval.search import RAGService

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(client, world):
    client.force_login(world.owner_a)
    return client


@pytest.fixture
def viewer(client, world):
    client.force_login(world.viewer_a)
    return client


def found(world, query: str) -> list[int]:
    hits = RAGService(world.tenant_a).search(query, world.kb_a.pk, mode="keyword").hits
    return [hit.chunk_id for hit in hits]


def sensors_chunk(world) -> Chunk:
    return Chunk.objects.get(document=world.docs_a["sensors.md"])


def test_edit_a_chunk_on_its_page_and_search_follows(owner, world):
    chunk = sensors_chunk(world)
    page = owner.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()
    assert 'id="chunk-edit"' in page and "Disable this chunk" in page
    response = owner.post(
        reverse("admin:knowledge_chunk_curate", args=[chunk.pk]),
        {
            "content": "The TH09 gauge reads pressure.",
            "extra_keywords": "manometer\n\n",
            "extra_questions": "Which gauge reads pressure?",
        },
        follow=True,
    )
    page = response.content.decode()
    assert "Saved" in page and "kb-edited" in page and "manometer" in page
    chunk.refresh_from_db()
    assert chunk.content == "The TH09 gauge reads pressure." and chunk.edited_by == world.owner_a
    assert found(world, "manometer") == [chunk.pk]
    assert chunk.pk not in found(world, "casing temperature")


def test_an_empty_text_is_refused_with_a_message_and_nothing_changes(owner, world):
    chunk = sensors_chunk(world)
    response = owner.post(
        reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"content": "  "}, follow=True
    )
    assert "Nothing was changed" in response.content.decode()
    assert Chunk.objects.get(pk=chunk.pk).content == chunk.content


def test_disable_a_chunk_and_a_document_from_their_pages_with_badges(owner, world):
    chunk = sensors_chunk(world)
    owner.post(reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"enabled": "0"})
    assert not Chunk.objects.get(pk=chunk.pk).enabled
    assert chunk.pk not in found(world, "TH01 casing")
    document = world.docs_a["pumps.md"]
    page = owner.get(reverse("admin:knowledge_document_change", args=[chunk.document_id]))
    assert "kb-disabled" in page.content.decode()  # the chunk card's badge
    owner.post(reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"enabled": "1"})
    assert chunk.pk in found(world, "TH01 casing")

    assert found(world, "centrifugal pump")
    owner.post(reverse("admin:knowledge_document_enabled", args=[document.pk]), {"enabled": "0"})
    assert not Document.objects.get(pk=document.pk).enabled
    assert not found(world, "centrifugal pump")
    listing = owner.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert f'data-disabled="{document.pk}"' in listing
    owner.post(reverse("admin:knowledge_document_enabled", args=[document.pk]), {"enabled": "1"})
    assert found(world, "centrifugal pump")


def test_list_actions_disable_and_enable_many(owner, world):
    ids = [d.pk for d in world.docs_a.values()]
    url = reverse("admin:knowledge_document_changelist")
    owner.post(url, {"action": "disable_selected", "_selected_action": ids})
    assert not Document.objects.filter(pk__in=ids, enabled=True).exists()
    assert not found(world, "pump") and not found(world, "sensor")
    owner.post(url, {"action": "enable_selected", "_selected_action": ids})
    assert found(world, "pump")

    chunk_ids = list(Chunk.objects.filter(document__in=ids).values_list("pk", flat=True))
    url = reverse("admin:knowledge_chunk_changelist")
    owner.post(url, {"action": "disable_selected", "_selected_action": chunk_ids})
    assert not Chunk.objects.filter(pk__in=chunk_ids, enabled=True).exists()
    assert not found(world, "pump")
    listing = owner.get(url).content.decode()
    assert listing.count("kb-badge kb-disabled") >= len(chunk_ids)


def test_add_a_chunk_on_the_document_page(owner, world):
    document = world.docs_a["pumps.md"]
    page = owner.get(reverse("admin:knowledge_document_change", args=[document.pk]))
    assert 'id="add-chunk"' in page.content.decode()
    response = owner.post(
        reverse("admin:knowledge_document_add_chunk", args=[document.pk]),
        {"content": "Spare seals are in bin 4.", "extra_keywords": "spares"},
    )
    added = Chunk.objects.get(document=document, origin=Chunk.Origin.MANUAL)
    assert response.url == reverse("admin:knowledge_chunk_change", args=[added.pk])
    assert found(world, "spares") == [added.pk]


def test_reprocess_shows_how_many_hand_edits_it_would_discard_and_asks(owner, world):
    chunk = sensors_chunk(world)
    owner.post(reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"enabled": "0"})
    url = reverse("admin:knowledge_document_reprocess", args=[chunk.document_id])
    page = owner.post(url).content.decode()
    assert "the hand edits of 1 chunk" in page and 'id="confirm-reprocess"' in page
    assert Document.objects.get(pk=chunk.document_id).status == "ready"  # not yet
    owner.post(url, {"discard_hand_edits": "1"})
    assert Document.objects.get(pk=chunk.document_id).status == "pending"


def test_a_viewer_cannot_curate(viewer, world):
    chunk = sensors_chunk(world)
    response = viewer.post(
        reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"enabled": "0"}
    )
    assert response.status_code == 403
    document = world.docs_a["pumps.md"]
    for name in ("knowledge_document_enabled", "knowledge_document_add_chunk"):
        response = viewer.post(reverse(f"admin:{name}", args=[document.pk]), {"content": "x"})
        assert response.status_code == 403
    assert Chunk.objects.get(pk=chunk.pk).enabled and Document.objects.get(pk=document.pk).enabled
    assert not Chunk.objects.filter(origin=Chunk.Origin.MANUAL).exists()


def test_another_tenants_chunk_is_404(client, world):
    client.force_login(world.owner_b)
    chunk = sensors_chunk(world)
    response = client.post(
        reverse("admin:knowledge_chunk_curate", args=[chunk.pk]), {"enabled": "0"}
    )
    assert response.status_code == 404
    assert Chunk.objects.get(pk=chunk.pk).enabled


# ---------------------------------------------------------------------- bulk


def test_delete_selected_takes_many_out_at_once_and_a_task_deletes_them(owner, world, eager_tasks):
    ids = [d.pk for d in world.docs_a.values()]
    url = reverse("admin:knowledge_document_changelist")
    with eager_tasks():
        owner.post(url, {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert not Document.objects.filter(pk__in=ids).exists()
    assert not Chunk.objects.filter(document_id__in=ids).exists()
    assert not found(world, "pump")


def test_retry_failed_action_on_the_knowledge_base_list(owner, world, eager_tasks):
    document = world.docs_a["pumps.md"]
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error="down")
    changelist = reverse("admin:knowledge_knowledgebase_changelist")
    with eager_tasks():
        # another tenant's knowledge base in the selection: not found, and nothing is done
        both = [world.kb_a.pk, world.kb_b.pk]
        response = owner.post(changelist, {"action": "retry_failed", "_selected_action": both})
        assert response.status_code == 404
        assert Document.objects.get(pk=document.pk).status == Document.Status.FAILED
        response = owner.post(
            changelist,
            {"action": "retry_failed", "_selected_action": [world.kb_a.pk]},
            follow=True,
        )
    assert "1 failed document(s) queued" in response.content.decode()
    assert Document.objects.get(pk=document.pk).status == Document.Status.READY


def test_upload_a_folder_and_a_zip_from_the_upload_page(owner, world):
    import io
    import zipfile

    from django.core.files.uploadedfile import SimpleUploadedFile

    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("docs/gears.md", "# Gears\n\nGear G-2 turns the drum.")
        zf.writestr("docs/run.exe", b"\x7fELF\x02\x01\x01" + bytes(300))
    page = owner.get(reverse("admin:knowledge_knowledgebase_upload", args=[world.kb_a.pk]))
    assert "webkitdirectory" in page.content.decode()
    response = owner.post(
        reverse("admin:knowledge_knowledgebase_upload", args=[world.kb_a.pk]),
        {
            "folder": [
                SimpleUploadedFile("belts.md", b"# Belts\n\nBelt B-1 drives the fan."),
                SimpleUploadedFile("chains.md", b"# Chains\n\nChain C-3 lifts the gate."),
            ],
            "files": [SimpleUploadedFile("parts.zip", archive.getvalue())],
        },
    )
    page = response.content.decode()
    assert page.count("kb-outcome-accepted") == 3 and page.count("kb-outcome-skipped") == 1
    assert "parts.zip/docs/run.exe" in page
    titles = set(Document.objects.filter(knowledge_base=world.kb_a).values_list("title", flat=True))
    assert {"belts", "chains", "gears"} <= titles


def test_pending_documents_show_their_place_in_the_fair_queue(owner, world):
    waiting = [world.docs_a["pumps.md"], world.docs_a["sensors.md"]]
    Document.objects.filter(pk__in=[d.pk for d in waiting]).update(
        status=Document.Status.PENDING, dispatched_at=None
    )
    listing = owner.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert "#1 in the queue" in listing and "#2 in the queue" in listing
    url = reverse("admin:knowledge_document_status") + f"?ids={waiting[0].pk},{waiting[1].pk}"
    statuses = owner.get(url).json()["documents"]
    assert sorted(s["queue"] for s in statuses.values()) == ["#1 in the queue", "#2 in the queue"]
    Document.objects.filter(pk=waiting[0].pk).update(dispatched_at=waiting[0].created_at)
    statuses = owner.get(url).json()["documents"]
    assert statuses[str(waiting[0].pk)]["queue"] == "sent to a worker"
    assert statuses[str(waiting[1].pk)]["queue"] == "#1 in the queue"
