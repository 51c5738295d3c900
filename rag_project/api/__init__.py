"""REST API plumbing shared by every endpoint: API-key authentication, the tenant of a request,
permissions by role and scope, one error shape, pagination, throttling, bounded uploads, and the
OpenAPI pieces that describe them. The endpoints live in ``knowledge.api`` and ``retrieval.api``.
"""
