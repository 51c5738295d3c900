"""Django database backend for the embedded PostgreSQL (see :mod:`rag_project.embedded`)."""
