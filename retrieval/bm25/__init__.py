"""BM25 keyword scoring: a compact inverted index with rank_bm25-exact scores (no Django)."""

from retrieval.bm25.index import FORMAT_VERSION, BM25Index, BM25Params

__all__ = ["FORMAT_VERSION", "BM25Index", "BM25Params"]
