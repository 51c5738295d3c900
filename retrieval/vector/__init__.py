"""The vector leg: an exact scan of a knowledge base's vectors in memory (``matrix``), pgvector's
HNSW index beyond it (``hnsw``), the policy choosing between them (``policy``), and the
query-embedding cache both use (``query_cache``)."""
