"""``Authorization: Bearer <API key>``: a tenant's key, checked on every request.

Nothing about a key's validity is cached: a revoked key answers 401 on the very next request.
``last_used_at`` is written at most once a minute per key (tenancy.services). Keys
never reach a log: the header is not logged and failures name no key.

Failed attempts are counted per client address (``tenancy.api.throttling``): past
``RAG_AUTH_FAILURE_RATE`` an address's attempts answer 429 (``throttled``, with ``Retry-After``)
instead of 401, except with a key that already authenticated from that address. The REST API,
Dify's endpoint and ``/mcp`` all authenticate through ``ApiKeyAuthentication``, so all three
count on the same counter.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from tenancy.api.throttling import admit_api_key, count_failed_authentication
from tenancy.models import ApiKey
from tenancy.selectors import find_api_key
from tenancy.services import record_use


class ApiKeyUser:
    """``request.user`` of a request made with an API key: authenticated, but nobody."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key

    def get_username(self) -> str:
        return f"API key {self.api_key.prefix}"

    username = property(get_username)

    def __str__(self) -> str:
        return self.get_username()


def authenticate_api_key(raw_key: str) -> ApiKey:
    """The live key ``raw_key`` names, its use recorded; AuthenticationFailed (401) when it is
    unknown or revoked. The one check of a key, for the REST API and the MCP server alike."""
    api_key = find_api_key(raw_key)
    if api_key is None:
        raise AuthenticationFailed("Invalid API key.", code="invalid_api_key")
    if api_key.revoked_at is not None:
        raise AuthenticationFailed("This API key has been revoked.", code="api_key_revoked")
    record_use(api_key)
    return api_key


class ApiKeyAuthentication(BaseAuthentication):
    """Authenticates ``Bearer rag_...`` headers; any other scheme is left to the next class."""

    keyword = b"bearer"

    def authenticate(self, request):
        """``request`` is DRF's or Django's (``/mcp``): only its headers and META are read."""
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        try:
            api_key = self._key(request, parts)
        except AuthenticationFailed:
            count_failed_authentication(request)  # 429 instead, past the address's limit
            raise
        admit_api_key(request, api_key)
        return ApiKeyUser(api_key), api_key

    def _key(self, request, parts: list[bytes]) -> ApiKey:
        if len(parts) != 2:
            raise AuthenticationFailed(
                "Invalid Authorization header: expected 'Bearer <API key>'.",
                code="invalid_authorization_header",
            )
        try:
            raw_key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid API key.", code="invalid_api_key") from None
        return authenticate_api_key(raw_key)

    def authenticate_header(self, request) -> str:
        # Present, so DRF answers 401 (not 403) to requests without credentials.
        return 'Bearer realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = ApiKeyAuthentication
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "rag_<prefix>_<secret>",
            "description": "A tenant's API key, created with `manage.py create_api_key` or "
            "`POST /api/v1/api-keys`. Scopes: `read` (list, retrieve, search), `write` "
            "(create, upload, update, delete).",
        }
