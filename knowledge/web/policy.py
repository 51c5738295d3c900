"""The fetch policy of this deployment, from the RAG_WEB_* settings."""

from __future__ import annotations

from django.conf import settings

from knowledge.web.addresses import AllowList
from knowledge.web.fetch import FetchPolicy


def allow_list() -> AllowList:
    return AllowList.parse(settings.RAG_WEB_ALLOWED_HOSTS)


def fetch_policy(max_bytes: int | None = None) -> FetchPolicy:
    """The settings' policy; ``max_bytes`` (a web source's page cap) may only lower the cap."""
    cap = settings.RAG_WEB_MAX_BYTES
    return FetchPolicy(
        allowed=allow_list(),
        max_bytes=min(cap, max_bytes) if max_bytes else cap,
        timeout_s=settings.RAG_WEB_TIMEOUT_S,
        max_redirects=settings.RAG_WEB_MAX_REDIRECTS,
        user_agent=settings.RAG_WEB_USER_AGENT,
    )
