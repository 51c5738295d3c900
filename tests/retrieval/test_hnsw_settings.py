"""HNSW search settings: ef_search comes from RAG_HNSW_EF_SEARCH (or a benchmark's override)
and is never below the rows a search asks for."""

from retrieval.vector import hnsw


def test_ef_search_is_the_setting_and_never_below_the_rows_asked_for(settings):
    settings.RAG_HNSW_EF_SEARCH = 64
    assert hnsw.ef_search(15) == 64
    assert hnsw.ef_search(100) == 100  # a candidate list shorter than the answer drops rows
    assert hnsw.ef_search(15, 200) == 200 and hnsw.ef_search(15, 10) == 15
    settings.RAG_HNSW_EF_SEARCH = 8
    assert hnsw.ef_search(15) == 15
