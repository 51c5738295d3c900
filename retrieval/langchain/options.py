"""What the local retrievers share: the knowledge bases to search and the options of
``RAGService.search``, as retriever fields that a call can override (the client package's
remote retriever has the same fields). No Django imports.

``None`` means "the knowledge base's default". ``k`` is LangChain's name for ``top_k``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, model_validator

from retrieval.search.types import SearchMode


class BaseKnowledgeBaseRetriever(BaseRetriever):
    """Hybrid search over one or several knowledge bases. Give ``knowledge_base_id=`` for one,
    ``knowledge_base_ids=`` for several; every option can be set on the retriever or per call:
    ``retriever.invoke("query", k=3, mode="keyword")``."""

    knowledge_base_ids: list[int] = Field(min_length=1)
    k: int | None = Field(default=None, ge=1)
    mode: SearchMode | None = None
    vector_weight: float | None = Field(default=None, ge=0)
    keyword_weight: float | None = Field(default=None, ge=0)
    score_threshold: float | None = None
    filters: dict[str, Any] | None = None
    """``{"metadata": {"project": "apollo"}, "document_ids": [...], "max_age_days": 30,
    "created_after": ..., "created_before": ..., "exclude_chunk_ids": [...]}``; see
    ``retrieval.search.types.SearchFilters``."""
    rerank: bool | None = None
    rerank_top_n: int | None = Field(default=None, ge=1)
    candidate_multiplier: int | None = Field(default=None, ge=1)
    """Each leg fetches ``k x candidate_multiplier`` candidates before fusion."""
    use_rerank: bool | None = None
    """Not the cross-encoder (``rerank``): true fuses both legs over 3x candidates, false
    returns the vector leg's results only."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    """A misspelt option is an error, not a default silently kept; errors do not echo the
    arguments (as the remote retriever's, which hold an API key)."""

    option_names: ClassVar[tuple[str, ...]] = (
        "k",
        "mode",
        "vector_weight",
        "keyword_weight",
        "score_threshold",
        "filters",
        "rerank",
        "rerank_top_n",
        "candidate_multiplier",
        "use_rerank",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, values: Any) -> Any:
        """``knowledge_base_id=`` for one knowledge base; ``top_k=`` for ``k``."""
        if not isinstance(values, dict):
            return values
        values = _k_for_top_k(values, ValueError)
        if "knowledge_base_id" in values:
            if "knowledge_base_ids" in values:
                raise ValueError("give knowledge_base_id or knowledge_base_ids, not both")
            values["knowledge_base_ids"] = [values.pop("knowledge_base_id")]
        return values

    def search_options(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The options of one search: the fields overridden by the call's keywords, ``k`` as
        ``top_k``, unset ones left out. Raises TypeError for an unknown option.
        ``top_k`` (the REST API's name) is taken for ``k``."""
        overrides = _k_for_top_k(overrides, TypeError)
        unknown = set(overrides) - set(self.option_names)
        if unknown:
            raise TypeError(f"unknown search options: {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in self.option_names} | dict(overrides)
        values["top_k"] = values.pop("k")
        return {name: value for name, value in values.items() if value is not None}


def _k_for_top_k(options: Mapping[str, Any], error: type[Exception]) -> dict[str, Any]:
    """``options`` with ``top_k`` renamed ``k``; both at once raise ``error``."""
    options = dict(options)
    if "top_k" in options:
        if "k" in options:
            raise error("give k or top_k (the same option), not both")
        options["k"] = options.pop("top_k")
    return options
