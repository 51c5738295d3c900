"""LangChain over the REST API (the ``[langchain]`` extra): ``RemoteKnowledgeBaseRetriever``
and ``create_search_tool``."""

from rag_kb_client.langchain.retriever import RemoteKnowledgeBaseRetriever
from rag_kb_client.langchain.tools import create_search_tool

__all__ = ["RemoteKnowledgeBaseRetriever", "create_search_tool"]
