"""REST endpoints of knowledge: knowledge bases, documents, chunks and API keys."""
