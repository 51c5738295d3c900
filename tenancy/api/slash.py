"""The REST API answers the same with or without a trailing slash.

Clients and pasted endpoint URLs (Dify's external knowledge base setting among them) often add
one. A redirect would lose a POST's body with many clients, so the path is rewritten instead:
a request under ``/api/`` whose path ends with ``/`` and matches no API view, but would match
one without the slash, is routed to that view. The OpenAPI schema lists each path once, without
the slash (the URL patterns themselves are unchanged).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

FALLBACK = "api-fallback"  # the catch-all of tenancy/api/fallback_urls.py


def _is_api_view(path: str) -> bool:
    try:
        return resolve(path).url_name != FALLBACK
    except Resolver404:
        return False


class TrailingSlashMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path.startswith("/api/") and path.endswith("/") and not _is_api_view(path):
            stripped = path.rstrip("/")
            if _is_api_view(stripped):
                request.path_info = stripped
        return self.get_response(request)
