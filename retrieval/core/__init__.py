"""The lowest layer of ``retrieval``: what the BM25 index, its store, the vector leg and the
search share, importing none of them.

- ``identity``: which knowledge base, in which life of the database (``Identity``,
  ``identity_of``);
- ``snapshot``: one consistent read of a knowledge base at a version (REPEATABLE READ);
- ``stamps``: the documents a version reflects, and when each was last processed;
- ``lru``: ``ByteLRU``, the one cache bounded by the bytes it holds;
- ``filters``: ``SearchFilters`` (no Django), and ``filter_sql`` their SQL, which both legs
  read.

Above it: ``bm25`` (the index, pure) <- ``bm25store`` (its tiers); ``vector``; then ``search``
on all of them (``tests/foundation/test_layering.py`` holds the whole table).
"""
