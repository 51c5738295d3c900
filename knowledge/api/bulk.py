"""Bulk document operations of a knowledge base: retry every failed document, delete many.
Both answer 202 at once: the work runs in the worker in batches (``knowledge.services.bulk``),
and the documents' status (or their absence from the list) shows how far it got."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from knowledge import access
from knowledge.models import Document
from knowledge.services.bulk import request_deletion, retry_failed_documents
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.roles import Permission

TAGS = ["documents"]
MAX_IDS = 10_000


class BulkDeleteSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        min_length=1,
        max_length=MAX_IDS,
        required=False,
        help_text=f"The documents to delete (at most {MAX_IDS:,}); ids of other knowledge "
        "bases are ignored.",
    )
    status = serializers.ListField(
        child=serializers.ChoiceField(choices=Document.Status.choices),
        min_length=1,
        required=False,
        help_text='Or: every document in these states (e.g. ["failed"]).',
    )

    def validate(self, attrs: dict) -> dict:
        if ("ids" in attrs) == ("status" in attrs):
            raise serializers.ValidationError("Give either ids or status (not both).")
        return attrs


class DeletingSerializer(serializers.Serializer):
    deleting = serializers.IntegerField(
        help_text="Documents leaving search now; their rows and files go in the background."
    )


class QueuedSerializer(serializers.Serializer):
    queued = serializers.IntegerField(help_text="Failed documents set back to pending.")


class RetryFailedView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}

    @extend_schema(
        summary="Retry every failed document",
        description="Sets the knowledge base's failed documents back to pending in one step "
        "and queues their processing in the background; follow them with "
        "GET .../documents?status=pending,failed.",
        request=None,
        responses={
            202: OpenApiResponse(QueuedSerializer, description="Queued."),
            **error_responses(404),
        },
        tags=TAGS,
    )
    def post(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        queued = retry_failed_documents(tenant=self.tenant, knowledge_base=kb)
        return Response({"queued": queued}, status=status.HTTP_202_ACCEPTED)


class BulkDeleteView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}

    @extend_schema(
        summary="Delete many documents",
        description="By ids or by status. They leave search and the document list at once; "
        "their rows, chunks and stored files are deleted in the background in batches "
        "(the knowledge base's deleting_document_count shows what is left).",
        request=BulkDeleteSerializer,
        responses={
            202: OpenApiResponse(DeletingSerializer, description="Deleting."),
            **error_responses(400, 404),
        },
        tags=TAGS,
    )
    def post(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        serializer = BulkDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        deleting = request_deletion(
            tenant=self.tenant,
            knowledge_base=kb,
            document_ids=data.get("ids"),
            statuses=data.get("status"),
        )
        return Response({"deleting": deleting}, status=status.HTTP_202_ACCEPTED)
