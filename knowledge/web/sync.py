"""One sync of a web source: discover its pages, fetch each (conditionally when the last fetch
left an ETag or Last-Modified), and turn what changed into documents.

- A new page becomes a document of the knowledge base (queued for processing on commit).
- A page whose bytes changed (by sha256) gets them as its document's new file and is processed
  again; a page that answered 304, or the same bytes, is left alone: only changed pages are
  re-processed.
- A page answering 404 or 410 is removed with its document. A page that fails otherwise
  (timeout, 5xx, too large, unsupported type) keeps its document and records the error: a
  flaky server must not empty a knowledge base.
- Pages a sync did not find are removed too, but only when the sync was complete (not cut by
  the page, byte or time limit): a cut sync cannot know what it did not reach.

Pages come from the sitemaps (the source's, robots.txt's ``Sitemap:`` lines, or /sitemap.xml);
without one, from links followed breadth first from the start URL up to ``max_depth`` hops.
Either way only URLs in the source's scope that robots.txt allows for our user agent.

Safe to run twice: one sync per source at a time (a Redis lock; a second run returns at once),
and a run that repeats one changes nothing (pages answer 304 or the same bytes).
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass
from urllib.parse import urljoin

from django.core.cache import cache
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from knowledge.ingestion.parsing import FileType, ParseError
from knowledge.models import Document
from knowledge.services.documents import (
    DuplicateDocument,
    create_document,
    delete_document,
    delete_files_on_commit,
    enqueue_processing,
)
from knowledge.web import discovery
from knowledge.web.addresses import Resolver, system_resolver
from knowledge.web.documents import MAX_URL_CHARS
from knowledge.web.fetch import Fetched, FetchTimedOut, HttpStatusError, fetch
from knowledge.web.models import WebPage, WebSource
from knowledge.web.policy import fetch_policy
from knowledge.web.sniff import sniff

logger = logging.getLogger(__name__)
_GONE = (404, 410)
_MAX_SITEMAP_FILES = 50


@dataclass
class Progress:
    """What a sync has done so far (shown in the admin and the API)."""

    found: int = 0  # pages in scope discovered
    fetched: int = 0  # pages that answered (200 or 304)
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    duplicates: int = 0  # pages whose bytes another document already has
    removed: int = 0
    bytes: int = 0
    stopped: str = ""  # the limit that cut the sync short, if one did


class _Stop(Exception):
    """A limit was reached: the sync ends here, incomplete."""


class SyncFailed(Exception):
    """The sync could not run at all (its sitemap or robots.txt could not be read)."""


def sync_web_source(source_id: int, resolver: Resolver = system_resolver) -> str:
    """Run one sync of the source; returns its outcome ("done", "failed", "running elsewhere",
    "missing")."""
    source = WebSource.objects.select_related("knowledge_base").filter(pk=source_id).first()
    if source is None:
        return "missing"
    key, token = f"web-sync:{source_id}", uuid.uuid4().hex
    if not cache.add(key, token, timeout=source.time_budget_s + 300):
        return "running elsewhere"
    try:
        return _sync(source, resolver)
    finally:
        if cache.get(key) == token:
            cache.delete(key)


def _sync(source: WebSource, resolver: Resolver) -> str:
    now = timezone.now()
    WebSource.objects.filter(pk=source.pk).update(
        sync_status=WebSource.SyncStatus.RUNNING,
        sync_count=F("sync_count") + 1,
        last_sync_started_at=now,
        progress=asdict(Progress()),
        error="",
        updated_at=now,
    )
    source.refresh_from_db()
    crawl = _Crawl(source, resolver)
    status, error = WebSource.SyncStatus.DONE, ""
    try:
        crawl.run()
    except SyncFailed as exc:
        status, error = WebSource.SyncStatus.FAILED, str(exc)
    except Exception as exc:  # recorded on the source; a re-run would fail the same way
        logger.exception("sync of web source %s failed", source.pk)
        status, error = WebSource.SyncStatus.FAILED, f"the sync stopped on an error: {exc}"
    WebSource.objects.filter(pk=source.pk).update(
        sync_status=status,
        last_sync_finished_at=timezone.now(),
        progress=asdict(crawl.progress),
        error=error,
        updated_at=timezone.now(),
    )
    return status


class _Crawl:
    def __init__(self, source: WebSource, resolver: Resolver) -> None:
        self.source, self.resolver = source, resolver
        self.kb = source.knowledge_base
        self.policy = fetch_policy(source.max_page_bytes)
        self.agent = self.policy.user_agent.split("/", 1)[0]
        self.scope = discovery.Scope(
            discovery.canonical(source.start_url),
            tuple(source.include_prefixes),
            tuple(source.exclude_prefixes),
        )
        self.progress = Progress()
        self.deadline = time.monotonic() + source.time_budget_s
        self.visited = 0
        self.follow = False  # links are followed only without a sitemap

    # ------------------------------------------------------------------ discovery

    def run(self) -> None:
        try:
            self.rules = self._robots()
            listed = self._sitemap_pages()
            self.follow = follow = not listed and self.source.follow_links
            start = [u for u in [discovery.canonical(self.source.start_url)] if self._wanted(u)]
            frontier = deque((url, 0) for url in (listed or start))
            seen = {url for url, _ in frontier}
            self.progress.found = len(seen)
            while frontier:
                self._check_limits()
                url, depth = frontier.popleft()
                links = self._visit(url, depth)
                if not follow or depth >= self.source.max_depth:
                    continue
                for link in map(discovery.canonical, links):
                    if link not in seen and self._wanted(link):
                        seen.add(link)
                        frontier.append((link, depth + 1))
                self.progress.found = len(seen)
        except _Stop as stop:
            self.progress.stopped = str(stop)
        else:
            self._remove_unseen()
        finally:
            self._save_progress()

    def _wanted(self, url: str) -> bool:
        return (
            len(url) <= MAX_URL_CHARS
            and self.scope.holds(url)
            and self.rules.can_fetch(self.agent, url)
        )

    def _check_limits(self) -> None:
        if self.visited >= self.source.max_pages:
            raise _Stop(f"max pages ({self.source.max_pages}) reached")
        if self.progress.bytes >= self.source.max_total_bytes:
            raise _Stop(f"max total bytes ({self.source.max_total_bytes:,}) reached")
        if time.monotonic() >= self.deadline:
            raise _Stop(f"time budget ({self.source.time_budget_s} s) used up")

    def _fetch(self, url: str, **validators: str) -> Fetched:
        try:
            return fetch(
                url, self.policy, resolver=self.resolver, deadline=self.deadline, **validators
            )
        except FetchTimedOut:
            if time.monotonic() >= self.deadline:
                raise _Stop(f"time budget ({self.source.time_budget_s} s) used up") from None
            raise

    def _robots(self):
        url = urljoin(self.scope.start_url, "/robots.txt")
        try:
            return discovery.robots(self._fetch(url).content)
        except HttpStatusError as exc:
            if exc.status >= 500:
                raise SyncFailed(f"{url} answered HTTP {exc.status}; try the sync later") from None
            return discovery.robots(None)  # no robots.txt: everything is allowed
        except ParseError as exc:
            raise SyncFailed(f"robots.txt could not be read: {exc}") from None

    def _sitemap_pages(self) -> list[str]:
        given = self.source.sitemap_url
        default = self.rules.site_maps() or [urljoin(self.scope.start_url, "/sitemap.xml")]
        queue = deque([given] if given else default)
        pages: list[str] = []
        read = 0
        while queue and read < _MAX_SITEMAP_FILES:
            url = queue.popleft()
            read += 1
            try:
                fetched = self._fetch(url)
            except ParseError as exc:
                if given and url == given:
                    raise SyncFailed(f"the sitemap could not be read: {exc}") from None
                continue
            found = discovery.parse_sitemap(fetched.content, self.policy.max_bytes)
            queue.extend(found.sitemaps)
            pages.extend(p for p in map(discovery.canonical, found.pages) if self._wanted(p))
        return list(dict.fromkeys(pages))

    # ------------------------------------------------------------------ one page

    def _visit(self, url: str, depth: int) -> list[str]:
        """Fetch one page and store what changed; returns its links (HTML pages only)."""
        self.visited += 1
        page = WebPage.objects.filter(source=self.source, url=url).select_related("document")
        page = page.first() or WebPage(tenant_id=self.source.tenant_id, source=self.source, url=url)
        page.depth = min(page.depth, depth) if page.pk else depth
        page.seen_in_sync = self.source.sync_count
        stored = page.document if page.document_id and page.document.file else None
        validators = {"etag": page.etag, "last_modified": page.last_modified} if stored else {}
        try:
            fetched = self._fetch(url, **validators)
        except HttpStatusError as exc:
            if exc.status in _GONE and page.pk:
                self._remove(page)
                return []
            return self._failed(page, exc)
        except ParseError as exc:
            return self._failed(page, exc)
        self.progress.fetched += 1
        self.progress.bytes += len(fetched.content)
        page.etag, page.last_modified = fetched.etag[:500], fetched.last_modified[:100]
        page.fetched_at, page.error = timezone.now(), ""
        if fetched.not_modified or (stored and page.sha256 == _sha(fetched.content)):
            self.progress.unchanged += 1
            page.save()
            self._save_progress()
            if not self.follow:
                return []
            content = fetched.content or _read(stored)
            return self._links(fetched.url, content, stored.file_type if stored else "")
        try:
            name, kind = sniff(fetched.url, fetched.content, fetched.content_type)
            self._store(page, name, kind, fetched.content)
        except ParseError as exc:
            return self._failed(page, exc)
        self._save_progress()
        return self._links(fetched.url, fetched.content, kind)

    def _links(self, base: str, content: bytes, kind: str) -> list[str]:
        return discovery.html_links(base, content) if kind == FileType.HTML and content else []

    def _store(self, page: WebPage, name: str, kind: FileType, content: bytes) -> None:
        sha256 = _sha(content)
        try:
            with transaction.atomic():
                if page.document_id:
                    replace_content(page.document, name, kind, content, sha256)
                    self.progress.changed += 1
                else:
                    page.document = create_document(
                        tenant=self.source.tenant,
                        knowledge_base=self.kb,
                        name=name,
                        stream=io.BytesIO(content),
                    )
                    Document.objects.filter(pk=page.document.pk).update(source_url=page.url)
                    self.progress.new += 1
                page.sha256, page.changed_at = sha256, timezone.now()
                page.save()
        except DuplicateDocument as exc:  # another page or upload has these bytes
            page.error = str(exc)
            page.save()
            self.progress.duplicates += 1

    def _failed(self, page: WebPage, error: Exception) -> list[str]:
        page.error = str(error)[:2000]
        page.save()
        self.progress.failed += 1
        self._save_progress()
        return []

    # ------------------------------------------------------------------ removal

    def _remove(self, page: WebPage) -> None:
        if page.document_id:
            delete_document(tenant=self.source.tenant, document=page.document)
        page.delete()
        self.progress.removed += 1

    def _remove_unseen(self) -> None:
        unseen = WebPage.objects.filter(source=self.source, seen_in_sync__lt=self.source.sync_count)
        for page in unseen.select_related("document"):
            self._remove(page)

    def _save_progress(self) -> None:
        WebSource.objects.filter(pk=self.source.pk).update(
            progress=asdict(self.progress), updated_at=timezone.now()
        )


def replace_content(document: Document, name: str, kind: FileType, content: bytes, sha256: str):
    """A changed page's new bytes become its document's file, and it is processed again
    (it leaves search until it is ready, as a reprocessed document does)."""
    other = (
        Document.objects.filter(knowledge_base_id=document.knowledge_base_id, sha256=sha256)
        .exclude(pk=document.pk)
        .first()
    )
    if other is not None:
        raise DuplicateDocument(other)
    old = document.file.name
    document.file.save(name, ContentFile(content), save=False)
    Document.objects.filter(pk=document.pk).update(
        file=document.file.name,
        original_filename=name[:255],
        title=name.rsplit(".", 1)[0][:500],
        file_type=str(kind),
        size_bytes=len(content),
        sha256=sha256,
        status=Document.Status.PENDING,
        progress=0,
        error="",
        attempts=0,
        updated_at=timezone.now(),
    )
    delete_files_on_commit([old] if old else [])
    enqueue_processing(document.pk)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _read(document: Document | None) -> bytes:
    if document is None:
        return b""
    with document.file.open("rb") as handle:
        return handle.read()
