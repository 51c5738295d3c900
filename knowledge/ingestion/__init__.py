"""Document ingestion: turn an uploaded file into stored, searchable chunks.

`parsing` and `chunking` are pure Python (no Django) so they can be tested and reused on
their own; the Django services that store documents and chunks build on them.
"""
