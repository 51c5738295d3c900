"""HTML fragments shared by the admin pages. Status, progress and chunk count carry
``data-doc`` and ``data-field`` so that status.js can keep them current."""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html

from knowledge.admin.selectors import queue_label
from knowledge.models import Document, KnowledgeBase
from knowledge.services.dispatch import queue_positions


def documents_url(kb: KnowledgeBase) -> str:
    """The documents list filtered to one knowledge base."""
    return reverse("admin:knowledge_document_changelist") + f"?knowledge_base__id__exact={kb.pk}"


def status_badge(document: Document) -> str:
    """The status badge and, for a failed document, its error; kept current by status.js."""
    return format_html(
        '<span class="kb-badge kb-{}" data-doc="{}" data-field="status" data-status="{}">{}'
        '</span><div class="kb-error" data-doc="{}" data-field="error">{}</div>',
        document.status,
        document.pk,
        document.status,
        document.get_status_display(),
        document.pk,
        document.error if document.status == Document.Status.FAILED else "",
    )


def queue_place(document: Document) -> str:
    """A pending document's place in the fair queue across tenants (nothing otherwise)."""
    if document.status != Document.Status.PENDING:
        return ""
    text = queue_label(queue_positions([document])[document.pk])
    return format_html(
        '<span class="kb-muted kb-queue" data-doc="{}" data-field="queue">{}</span>',
        document.pk,
        text,
    )


def disabled_badge(document: Document) -> str:
    """ "Disabled" for a document kept but never searched; nothing otherwise."""
    if document.enabled:
        return ""
    return format_html(
        '<span class="kb-badge kb-disabled" data-disabled="{}">Disabled</span>', document.pk
    )


def progress_bar(document: Document) -> str:
    return format_html(
        '<div class="kb-progress" data-doc="{}" data-field="progress" title="{}%">'
        '<div class="kb-progress-bar" style="width: {}%"></div><span>{}%</span></div>',
        document.pk,
        document.progress,
        document.progress,
        document.progress,
    )


def chunk_count(document: Document) -> str:
    return format_html(
        '<span data-doc="{}" data-field="chunk_count">{}</span>', document.pk, document.chunk_count
    )
