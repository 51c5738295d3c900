"""The base of every tenant endpoint: API-key authentication, the tenant of a request and what
its caller may do (``access``), permissions, throttling, the one error shape, pagination, id
converters and the OpenAPI pieces that describe them; and the endpoints of tenancy itself
(``me``, API keys). The other endpoints live in ``knowledge.api`` and ``retrieval.api``."""
