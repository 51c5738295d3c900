"""Web-import fixtures: an API client of ``tenant``, the allow-list opened to the test site."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.conftest import bearer


@pytest.fixture
def client(tenant, make_key) -> APIClient:
    """A read+write API key of ``tenant``."""
    return bearer(make_key(tenant))


@pytest.fixture
def local(settings):
    """127.0.0.1 (the test site) allow-listed, as an administrator would allow an intranet."""
    settings.RAG_WEB_ALLOWED_HOSTS = ["127.0.0.1"]
