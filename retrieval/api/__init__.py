"""REST endpoints of retrieval: search and context over one or several knowledge bases, and the
Dify External Knowledge API."""
