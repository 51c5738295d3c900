"""Tenancy: who may do what, where.

Tenants (the unit of isolation), their members and roles, API keys, authentication, throttling
and the one role table (``tenancy.roles``) every entry point decides with: the REST API, the
admin and the in-process LangChain classes. Also the vocabulary every app raises its errors in
(``tenancy.errors``). Depends on ``rag_project`` only; ``knowledge`` and ``retrieval`` build on it.
"""
