"""Several knowledge bases embedded by different models: cosine similarities of two models are
never compared; each model's vector candidates are ranked among themselves before fusion."""

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.search import RAGService
from retrieval.search.candidates import _interleaved
from tests.factories import add_document

pytestmark = pytest.mark.django_db

DOCS = {
    "pumps.md": "# Pumps\n\nThe P-100 centrifugal pump moves cooling water.",
    "seals.md": "# Seals\n\nReplace the mechanical seal of the pump when it drips.",
    "belts.md": "# Belts\n\nThe conveyor belt carries boxes to the dock.",
}


def kb_with(tenant, name: str, dimensions: int):
    kb = create_knowledge_base(
        tenant=tenant,
        name=name,
        embedding=EmbeddingConfig(provider="hash", dimensions=dimensions),
    )
    for file_name, text in DOCS.items():
        add_document(kb, file_name, text)
    return kb


def test_each_models_candidates_are_ranked_among_themselves(tenant):
    small, large = kb_with(tenant, "Small", 32), kb_with(tenant, "Large", 64)
    result = RAGService(tenant).search_multiple_knowledge_bases(
        "pump seal", [small.pk, large.pk], mode="vector", top_k=6
    )
    ranks = {
        kb: sorted(h.vector_rank for h in result.hits if h.knowledge_base_id == kb)
        for kb in (small.pk, large.pk)
    }
    assert ranks[small.pk] == [1, 2, 3] and ranks[large.pk] == [1, 2, 3]
    # the two models' first hits tie in fusion (same rank, same weight): ties by chunk id
    assert {result.hits[0].vector_rank, result.hits[1].vector_rank} == {1}


def test_one_model_keeps_one_ranking_across_knowledge_bases(tenant):
    first, second = kb_with(tenant, "First", 32), kb_with(tenant, "Second", 32)
    result = RAGService(tenant).search_multiple_knowledge_bases(
        "pump seal", [first.pk, second.pk], mode="vector", top_k=6
    )
    assert sorted(h.vector_rank for h in result.hits) == [1, 2, 3, 4, 5, 6]
    similarities = [h.vector_similarity for h in result.hits]
    assert similarities == sorted(similarities, reverse=True)


def test_interleaving_takes_every_first_then_every_second():
    assert _interleaved([[1, 2, 3], [7], [8, 9]]) == [1, 7, 8, 2, 9, 3]
    assert _interleaved([]) == []
