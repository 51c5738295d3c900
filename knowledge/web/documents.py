"""A document from a URL: created ``pending`` at once (nothing is fetched in the request, so a
slow site never holds a web worker), fetched by the worker as the first step of processing.

What can be judged without the network is judged before anything is stored: the scheme, the
URL's shape, and hosts that are addresses or local names (``127.0.0.1``, ``169.254.169.254``,
``localhost``...), which are refused unless allow-listed (``canonical_url``); URLs sent with an
upload are judged with its files, all or nothing (``knowledge.services.uploads``). Names are
resolved, and every redirect checked, when the worker fetches; a refusal then fails the
document with its reason.

The services store what this module judged (``services.documents.store_url_document``) and
never import it: the worker hands ``fetch_into`` to processing as its first step. Until it is
fetched the document has no file and a placeholder hash (of its URL), so the same URL twice
in a knowledge base is a duplicate like the same file twice. Once fetched, the bytes are its
file and their sha256 its hash; bytes already in the knowledge base fail it as a duplicate,
naming the document that has them.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from knowledge.ingestion.parsing import ParseError
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import CheckedUrl, store_url_document
from knowledge.web.fetch import UrlInvalid, check_url, fetch
from knowledge.web.policy import allow_list, fetch_policy
from knowledge.web.sniff import file_name, sniff
from tenancy.errors import ErrorKind, ensure_tenant
from tenancy.models import Tenant


class DuplicateContent(ParseError):
    code = "duplicate_document"
    kind = ErrorKind.CONFLICT


MAX_URL_CHARS = 2000  # Document.source_url, WebSource and WebPage URLs


def canonical_url(raw: str) -> str:
    """The checked URL as stored: http(s), no fragment, host lower-cased (``check_url``)."""
    url = str(check_url(raw, allow_list()))
    if len(url) > MAX_URL_CHARS:
        raise UrlInvalid(f"the URL is longer than {MAX_URL_CHARS} characters")
    return url


def check_url_document(raw: str) -> CheckedUrl:
    """``raw`` judged for storing as a document, without the network: its canonical URL and
    the file name its document has until fetched, or the refusal (UrlInvalid,
    AddressRefused) it carries instead."""
    try:
        url = canonical_url(raw)
    except ParseError as exc:
        return CheckedUrl(raw, refusal=exc)
    return CheckedUrl(raw, url, file_name(url))


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
    return store_url_document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        checked=check_url_document(url),
        title=title,
        metadata=metadata,
        replace=replace,
        queue=queue,
    )


def fetch_into(document: Document) -> None:
    """Fetch the document's URL and store the bytes as its file: the fetch step the worker
    gives ``knowledge.services.processing.process_document`` (which sets the status).
    FetchError, AddressRefused, UnsupportedFileType or DuplicateContent, each with a message
    to act on, when it cannot."""
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
