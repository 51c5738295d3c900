"""The package's tests run against a live server of the knowledge-base API, named by the
environment (they skip, saying so, when it does not):

- ``RAG_KB_URL``: the server, e.g. http://127.0.0.1:8000
- ``RAG_KB_API_KEY``: a key with the ``read`` scope
- ``RAG_KB_KNOWLEDGE_BASE_ID``: a knowledge base the key may search, holding the demo manuals
  (the server's tests/langchain/conftest.py ``make_manuals``; ``manage.py seed_demo`` does not)
- ``RAG_KB_HIDDEN_KNOWLEDGE_BASE_ID`` (optional): one of the key's tenant it may not search
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Server:
    url: str
    api_key: str
    knowledge_base_id: int
    hidden_knowledge_base_id: int | None
    timeout: float = 300.0  # a busy test server is slow, not broken


@pytest.fixture(scope="session")
def server() -> Server:
    url, key = os.environ.get("RAG_KB_URL"), os.environ.get("RAG_KB_API_KEY")
    kb = os.environ.get("RAG_KB_KNOWLEDGE_BASE_ID")
    if not (url and key and kb):
        pytest.skip("set RAG_KB_URL, RAG_KB_API_KEY and RAG_KB_KNOWLEDGE_BASE_ID")
    hidden = os.environ.get("RAG_KB_HIDDEN_KNOWLEDGE_BASE_ID")
    return Server(url, key, int(kb), int(hidden) if hidden else None)
