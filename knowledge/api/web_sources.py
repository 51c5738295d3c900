"""Web sources: ``/knowledge-bases/{id}/web-sources`` (list, create),
``/web-sources/{id}`` (retrieve, update, delete) and ``/web-sources/{id}/sync`` (202).

Creating, changing, deleting and syncing a source need ``write_documents``, as uploads do: a
source is a way of adding documents. Reading needs ``read``. A source of another tenant, or of
a knowledge base an API key is not allowed, answers 404 like a missing one.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from knowledge import access
from knowledge.web import selectors
from knowledge.web.models import WebSource
from knowledge.web.sources import (
    EDITABLE_FIELDS,
    create_web_source,
    delete_web_source,
    request_sync,
    update_web_source,
)
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.roles import Permission

TAGS = ["web sources"]


class WebSyncProgressSerializer(serializers.Serializer):
    found = serializers.IntegerField(help_text="Pages in scope discovered.")
    fetched = serializers.IntegerField(help_text="Pages that answered (200 or 304).")
    new = serializers.IntegerField()
    changed = serializers.IntegerField(help_text="Pages whose content changed: re-processed.")
    unchanged = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Pages that could not be fetched or read.")
    duplicates = serializers.IntegerField(help_text="Pages whose bytes a document already has.")
    removed = serializers.IntegerField(help_text="Pages gone (404/410, or no longer found).")
    bytes = serializers.IntegerField()
    stopped = serializers.CharField(help_text="The limit that cut the sync short, if one did.")


class WebSourceSerializer(serializers.ModelSerializer):
    knowledge_base_id = serializers.IntegerField(read_only=True)
    # Checked by the service (http(s), host not refused); plain strings in the schema, since a
    # blank sitemap_url is not a "uri".
    start_url = serializers.CharField(
        max_length=2000, help_text="Where links are followed from; its host is the scope."
    )
    sitemap_url = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="Blank: the sitemaps robots.txt names, else /sitemap.xml, else links.",
    )
    progress = WebSyncProgressSerializer(read_only=True, allow_null=True, source="progress_or_none")
    page_count = serializers.SerializerMethodField()

    class Meta:
        model = WebSource
        fields = [
            "id",
            "knowledge_base_id",
            *EDITABLE_FIELDS,
            "sync_status",
            "sync_count",
            "last_sync_started_at",
            "last_sync_finished_at",
            "progress",
            "error",
            "page_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [f for f in fields if f not in EDITABLE_FIELDS]
        extra_kwargs = {
            "include_prefixes": {"help_text": 'Only paths under these (e.g. ["/help/"]).'},
            "exclude_prefixes": {"help_text": "Never paths under these."},
            "error": {"help_text": "Why the last sync failed."},
        }

    def get_page_count(self, source: WebSource) -> int:
        return source.pages.count()


class WebSourceCreateSerializer(WebSourceSerializer):
    sync = serializers.BooleanField(
        default=True, write_only=True, help_text="Queue the first sync at once."
    )

    class Meta(WebSourceSerializer.Meta):
        fields = [*WebSourceSerializer.Meta.fields, "sync"]


def _fields(data: dict) -> dict:
    return {k: v for k, v in data.items() if k in EDITABLE_FIELDS}


class WebSourceListView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}

    @extend_schema(
        summary="List a knowledge base's web sources",
        responses={200: WebSourceSerializer(many=True), **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        return self.paginated(selectors.web_sources(self.tenant, kb), WebSourceSerializer)

    @extend_schema(
        summary="Add a web source",
        description="A site crawled into the knowledge base (its sitemap, or links from the "
        "start URL) within the limits, and synced again every sync_interval_s. The URLs are "
        "checked like a document's: addresses that are not public are refused unless "
        "RAG_WEB_ALLOWED_HOSTS names them.",
        request=WebSourceCreateSerializer,
        responses={201: WebSourceSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        serializer = WebSourceCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        source = create_web_source(
            tenant=self.tenant,
            knowledge_base=kb,
            sync=serializer.validated_data["sync"],
            **_fields(serializer.validated_data),
        )
        return Response(WebSourceSerializer(source).data, status=status.HTTP_201_CREATED)


class WebSourceDetailView(TenantAPIView):
    required = {"PATCH": Permission.WRITE_DOCUMENTS, "DELETE": Permission.WRITE_DOCUMENTS}

    def _get(self, pk: int) -> WebSource:
        return selectors.access_web_source(self.tenant, pk, self.access.knowledge_base_ids)

    @extend_schema(
        summary="Retrieve a web source with its sync progress",
        responses={200: WebSourceSerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        return Response(WebSourceSerializer(self._get(pk)).data)

    @extend_schema(
        summary="Change a web source",
        description="The new settings apply from the next sync.",
        request=WebSourceSerializer(partial=True),
        responses={200: WebSourceSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def patch(self, request, pk: int):
        source = self._get(pk)
        serializer = WebSourceSerializer(source, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        source = update_web_source(
            tenant=self.tenant, source=source, **_fields(serializer.validated_data)
        )
        return Response(WebSourceSerializer(source).data)

    @extend_schema(
        summary="Delete a web source",
        description="Deletes the source and the documents its pages became.",
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(404)},
        tags=TAGS,
    )
    def delete(self, request, pk: int):
        delete_web_source(tenant=self.tenant, source=self._get(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebSourceSyncView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}

    @extend_schema(
        summary="Sync a web source now",
        description="Queues a sync: new pages are added, changed pages re-processed, gone "
        "pages removed. Follow it in progress and sync_status.",
        request=None,
        responses={202: WebSourceSerializer, **error_responses(404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        source = selectors.access_web_source(self.tenant, pk, self.access.knowledge_base_ids)
        request_sync(tenant=self.tenant, source=source)
        return Response(WebSourceSerializer(source).data, status=status.HTTP_202_ACCEPTED)
