"""Web sources: a site (its sitemap, or links from a start page) crawled into a knowledge base
within limits and synced again on a schedule, and the pages found, each linked to the
document it became. Registered with the ``knowledge`` app through ``knowledge.models``."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.deconstruct import deconstructible

from tenancy.models import Tenant

MB = 1024 * 1024
DAY_S = 24 * 3600
# The most one sync may store: with max_pages and time_budget_s, what bounds a sync's work.
MAX_TOTAL_BYTES = 10 * 1024 * MB
MAX_SYNC_INTERVAL_S = 365 * DAY_S


@deconstructible
class SyncIntervalValidator:
    """0 (a sync only when asked), or at least ``RAG_WEB_MIN_SYNC_INTERVAL_S`` (read when a
    value is checked): a site re-crawled every few seconds costs the worker and the site alike
    and keeps nothing fresher that a person would notice."""

    def __call__(self, value: int) -> None:
        minimum = settings.RAG_WEB_MIN_SYNC_INTERVAL_S
        if value != 0 and value < minimum:
            raise ValidationError(
                "Ensure this value is 0 (sync only when asked) or at least %(minimum)s seconds.",
                code="min_value",
                params={"minimum": minimum},
            )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SyncIntervalValidator)

    def __hash__(self) -> int:
        return hash(SyncIntervalValidator)


def _prefixes() -> ArrayField:
    return ArrayField(models.CharField(max_length=500), default=list, blank=True)


class WebSource(models.Model):
    """A site kept in a knowledge base. Pages come from ``sitemap_url`` (or the sitemaps that
    robots.txt names, or /sitemap.xml) when there is one, else from links followed breadth
    first from ``start_url``; only pages on the start URL's host (scheme aside), under the
    include prefixes and outside the exclude prefixes, and allowed by robots.txt."""

    class SyncStatus(models.TextChoices):
        IDLE = "idle", "Never synced"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="web_sources")
    knowledge_base = models.ForeignKey(
        "knowledge.KnowledgeBase", on_delete=models.CASCADE, related_name="web_sources"
    )
    name = models.CharField(max_length=200, blank=True)
    start_url = models.URLField(max_length=2000)
    sitemap_url = models.URLField(max_length=2000, blank=True)
    include_prefixes = _prefixes()
    exclude_prefixes = _prefixes()
    follow_links = models.BooleanField(
        default=True, help_text="Without a sitemap: follow links from the start page."
    )
    max_pages = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    max_depth = models.PositiveSmallIntegerField(
        default=3, validators=[MaxValueValidator(50)], help_text="Link hops from the start page."
    )
    max_page_bytes = models.PositiveBigIntegerField(
        default=10 * MB, validators=[MinValueValidator(1024)]
    )
    max_total_bytes = models.PositiveBigIntegerField(
        default=500 * MB, validators=[MinValueValidator(1024), MaxValueValidator(MAX_TOTAL_BYTES)]
    )
    time_budget_s = models.PositiveIntegerField(
        default=1200, validators=[MinValueValidator(1), MaxValueValidator(6 * 3600)]
    )
    sync_interval_s = models.PositiveIntegerField(
        default=DAY_S,
        validators=[SyncIntervalValidator(), MaxValueValidator(MAX_SYNC_INTERVAL_S)],
        help_text="Seconds between scheduled syncs; 0: only when asked. At least the "
        "deployment's minimum (RAG_WEB_MIN_SYNC_INTERVAL_S, an hour by default), at most a year.",
    )

    sync_status = models.CharField(
        max_length=10, choices=SyncStatus.choices, default=SyncStatus.IDLE
    )
    sync_count = models.PositiveIntegerField(default=0)  # syncs started
    sync_requested_at = models.DateTimeField(null=True, blank=True)
    last_sync_started_at = models.DateTimeField(null=True, blank=True)
    last_sync_finished_at = models.DateTimeField(null=True, blank=True)
    # The counts of the current or last sync (knowledge.web.sync.Progress as a dict).
    progress = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "knowledge_base_id", "id"]
        indexes = [models.Index(fields=["sync_status"], name="websource_sync_status")]

    def __str__(self) -> str:
        return self.name or self.start_url

    @property
    def progress_or_none(self) -> dict | None:
        """The progress of the current or last sync, None before the first."""
        return self.progress or None


class WebPage(models.Model):
    """One page of a source, by canonical URL: the validators and content hash of its last
    fetch (a re-sync asks with them and re-processes only pages whose content changed) and
    the document it became."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(WebSource, on_delete=models.CASCADE, related_name="pages")
    url = models.URLField(max_length=2000)
    document = models.OneToOneField(
        "knowledge.Document",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="web_page",
    )
    depth = models.PositiveSmallIntegerField(default=0)
    etag = models.CharField(max_length=500, blank=True)
    last_modified = models.CharField(max_length=100, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    # The number of the source's sync that last found this page (pages a complete sync did
    # not find are removed).
    seen_in_sync = models.PositiveIntegerField(default=0)
    fetched_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["source_id", "url"]
        constraints = [
            models.UniqueConstraint(fields=["source", "url"], name="webpage_unique_url_per_source")
        ]

    def __str__(self) -> str:
        return self.url
