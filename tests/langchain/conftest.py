"""Fixtures for the LangChain integration: tenants, a knowledge base of manuals, the embeddings
of LangChain's standard suites, and the project's search API served over HTTP.

Async tests (the standard suites' among them) run under ``async_to_sync``, as Django's own test
runner runs them: the thread-sensitive ORM calls of the async methods then happen on the test's
thread and connection, inside its transaction, so they see the test's data and leave nothing
behind.
"""

from __future__ import annotations

import inspect
import itertools

import pytest
from asgiref.sync import async_to_sync
from langchain_core.embeddings import DeterministicFakeEmbedding

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from tenancy.services import create_api_key
from tests.conftest import CEILING_S
from tests.retrieval.conftest import MANUALS, add_document


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    async_to_sync(pyfuncitem.obj)(**arguments)
    return True


@pytest.fixture
def embeddings() -> DeterministicFakeEmbedding:
    """The embeddings LangChain's standard suites use (6 dimensions, not semantic)."""
    return DeterministicFakeEmbedding(size=6)


class Flaky(DeterministicFakeEmbedding):
    """Fails on any text mentioning "boom", as an embeddings API that rejects an input."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if any("boom" in text for text in texts):
            raise RuntimeError("input rejected")
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        if "boom" in text:
            raise RuntimeError("input rejected")
        return super().embed_query(text)


def make_manuals(tenant, name: str = "Manuals"):
    """A hash-embedding knowledge base with five small manuals, English and Chinese."""
    kb = create_knowledge_base(
        tenant=tenant, name=name, embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    kb.documents_by_name = {name: add_document(kb, name, text) for name, text in MANUALS.items()}
    return kb


@pytest.fixture
def manuals(tenant):
    return make_manuals(tenant)


class LiveSearchAPI:
    """The project's REST API served by ``live_server``: ``.url``, ``.add_key(tenant)``, and
    ``.timeout`` for the remote retrievers that call it."""

    # The live server is a thread of this busy test process: a request (the first search of a
    # knowledge base above all) can outlast the retriever's default 30 s on a loaded machine.
    # Tests that are not about timeouts wait as long as it takes, up to the ceiling.
    timeout = CEILING_S

    def __init__(self, url: str) -> None:
        self.url = url
        self._keys = itertools.count()

    def add_key(self, tenant, **options) -> str:
        options = {"scopes": ("read",), **options}
        _, raw_key = create_api_key(tenant=tenant, name=f"langchain {next(self._keys)}", **options)
        return raw_key


@pytest.fixture
def search_api(live_server) -> LiveSearchAPI:
    """The real search API over HTTP (its tests commit their data: ``transactional_db``)."""
    return LiveSearchAPI(live_server.url)
