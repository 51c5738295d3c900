"""A knowledge-base search tool for agents in the server's process, over the local retrievers.
(An agent elsewhere uses the client package's ``rag_kb_client.langchain.create_search_tool``,
which answers alike over the REST API.)

``create_search_tool(retriever)`` gives a langchain-core tool taking ``{"query": ...}`` and
answering with ``RAGService.format_for_tool_output`` (the best chunks with their citations);
the documents themselves are the tool message's ``artifact``. A search that cannot be answered
(unknown knowledge base, invalid query, API refused or unreachable) becomes the tool's answer
("Error: ..."), so the agent can tell the user instead of crashing.
"""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from retrieval.langchain.documents import document_to_hit
from retrieval.search.formatting import format_for_tool_output

DEFAULT_NAME = "search_knowledge_base"
DEFAULT_DESCRIPTION = (
    "Search the knowledge base for passages relevant to a question. Input: the question or "
    "keywords. Output: numbered passages with their document titles and relevance (0-1, how "
    "likely each answers the question); cite them by number."
)
# LookupError: an unknown knowledge base; ValueError: an invalid query or option.
_SEARCH_ERRORS = (LookupError, ValueError)


class SearchInput(BaseModel):
    query: str = Field(description="What to look for: a question or keywords.")


def create_search_tool(
    retriever: BaseRetriever,
    *,
    name: str = DEFAULT_NAME,
    description: str = DEFAULT_DESCRIPTION,
    max_chunks: int = 5,
) -> BaseTool:
    """A tool that searches with ``retriever`` (``KnowledgeBaseRetriever`` or
    ``RAGService.get_retriever``) and answers with at most ``max_chunks`` chunks."""

    def answer(documents: list[Document]) -> tuple[str, list[Document]]:
        hits = [document_to_hit(document) for document in documents]
        return format_for_tool_output(hits, max_chunks), documents

    def search(query: str) -> tuple[str, list[Document]]:
        try:
            return answer(retriever.invoke(query))
        except _SEARCH_ERRORS as exc:
            raise ToolException(str(exc)) from exc

    async def asearch(query: str) -> tuple[str, list[Document]]:
        try:
            return answer(await retriever.ainvoke(query))
        except _SEARCH_ERRORS as exc:
            raise ToolException(str(exc)) from exc

    return StructuredTool.from_function(
        func=search,
        coroutine=asearch,
        name=name,
        description=description,
        args_schema=SearchInput,
        response_format="content_and_artifact",
        handle_tool_error=_error_text,
    )


def _error_text(error: ToolException) -> str:
    return f"Error: {error}"
