"""A document from a URL: created ``pending`` at once (nothing is fetched in the request, so a
slow site never holds a web worker), fetched by the worker as the first step of processing.

What can be judged without the network is judged before anything is stored: the scheme, the
URL's shape, and hosts that are addresses or local names (``127.0.0.1``, ``169.254.169.254``,
``localhost``...), which are refused unless allow-listed (``canonical_url``); URLs sent with an
upload are judged with its files, all or nothing (``knowledge.services.uploads``). Names are
resolved, and every redirect checked, when the worker fetches; a refusal then fails the
document with its reason.

Until it is fetched the document has no file and a placeholder hash (of its URL), so the same
URL twice in a knowledge base is a duplicate like the same file twice. Once fetched, the bytes
are its file and their sha256 its hash; bytes already in the knowledge base fail it as a
duplicate, naming the document that has them.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from knowledge.ingestion.parsing import ParseError
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import (
    DuplicateDocument,
    delete_files_on_commit,
    enqueue_processing,
)
from knowledge.web.fetch import UrlInvalid, check_url, fetch
from knowledge.web.policy import allow_list, fetch_policy
from knowledge.web.sniff import file_name, sniff
from tenancy.errors import ErrorKind, ensure_tenant
from tenancy.models import Tenant


class DuplicateContent(ParseError):
    code = "duplicate_document"
    kind = ErrorKind.CONFLICT


def placeholder_sha256(url: str) -> str:
    """The hash of a document not fetched yet: unique per URL, never a real file's hash."""
    return hashlib.sha256(b"url\x00" + url.encode()).hexdigest()


MAX_URL_CHARS = 2000  # Document.source_url, WebSource and WebPage URLs


def canonical_url(raw: str) -> str:
    """The checked URL as stored: http(s), no fragment, host lower-cased (``check_url``)."""
    url = str(check_url(raw, allow_list()))
    if len(url) > MAX_URL_CHARS:
        raise UrlInvalid(f"the URL is longer than {MAX_URL_CHARS} characters")
    return url


def create_url_document(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    url: str,
    title: str = "",
    metadata: dict | None = None,
    replace: bool = False,
    queue: bool = True,
) -> Document:
    """A pending document for ``url``, queued (on commit) to be fetched and processed.

    Raises UrlInvalid and AddressRefused (400) before anything is stored, and
    DuplicateDocument when the knowledge base already has a document from this URL; with
    ``replace=True`` that document is fetched and processed again instead.
    """
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    url = canonical_url(url)
    existing = Document.objects.filter(knowledge_base=knowledge_base, source_url=url).first()
    if existing is not None:
        if not replace:
            raise DuplicateDocument(existing)
        refetch(existing, queue=queue)
        return existing
    name = file_name(url)
    document = Document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title=(title or PurePosixPath(name).stem)[:500],
        original_filename=name[:255],
        sha256=placeholder_sha256(url),
        source_url=url,
        metadata=dict(metadata or {}),
    )
    with transaction.atomic():
        document.save()
        if queue:
            enqueue_processing(document.pk)
    return document


def refetch(document: Document, *, queue: bool = True) -> None:
    """Fetch a URL's document again: its file goes (after commit) and it is processed anew."""
    with transaction.atomic():
        names = [document.file.name] if document.file else []
        Document.objects.filter(pk=document.pk).update(
            file="",
            sha256=placeholder_sha256(document.source_url),
            status=Document.Status.PENDING,
            progress=0,
            error="",
            attempts=0,
        )
        delete_files_on_commit(names)
        if queue:
            enqueue_processing(document.pk)
    document.refresh_from_db()


def needs_fetching(document: Document) -> bool:
    return bool(document.source_url) and not document.file


def fetch_into(document: Document) -> None:
    """Fetch the document's URL and store the bytes as its file (the first step of
    processing; ``processing`` sets the status). FetchError, AddressRefused,
    UnsupportedFileType or DuplicateContent, each with a message to act on, when it cannot."""
    fetched = fetch(document.source_url, fetch_policy())
    if not fetched.content:
        raise ParseError(f"{document.source_url} sent an empty page")
    name, kind = sniff(fetched.url, fetched.content, fetched.content_type)
    sha256 = hashlib.sha256(fetched.content).hexdigest()
    other = (
        Document.objects.filter(knowledge_base_id=document.knowledge_base_id, sha256=sha256)
        .exclude(pk=document.pk)
        .first()
    )
    if other is not None:
        raise _duplicate(document, other.pk)
    if document.title == PurePosixPath(document.original_filename).stem:
        document.title = PurePosixPath(name).stem[:500]
    document.original_filename = name[:255]
    document.file_type = str(kind)
    document.size_bytes = len(fetched.content)
    document.sha256 = sha256
    document.file.save(name, ContentFile(fetched.content), save=False)
    fields = ["file", "original_filename", "title", "file_type", "size_bytes", "sha256"]
    try:
        with transaction.atomic():
            document.save(update_fields=[*fields, "updated_at"])
    except IntegrityError:  # the same bytes were stored by another document meanwhile
        document.file.delete(save=False)
        raise _duplicate(document, None) from None


def _duplicate(document: Document, other_id: int | None) -> DuplicateContent:
    where = f" as document {other_id}" if other_id else ""
    return DuplicateContent(
        f"the content of {document.source_url} is already in the knowledge base{where}",
        existing_document_id=other_id,
    )
