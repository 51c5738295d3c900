"""Request and response bodies of the knowledge endpoints."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions, serializers

from knowledge import access
from knowledge.embeddings.local import DEFAULT_MODEL as LOCAL_DEFAULT_MODEL
from knowledge.embeddings.registry import PROVIDERS
from knowledge.ingestion.parsing import ACCEPTED_EXTENSIONS
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.dispatch import queue_positions
from knowledge.services.knowledge_bases import EDITABLE_FIELDS
from knowledge.services.uploads import Outcome
from tenancy.api.fields import FiniteFloatField, JSONObjectField
from tenancy.api.schema import ErrorDetailSerializer

# ---------------------------------------------------------------- knowledge bases


class EmbeddingSerializer(serializers.Serializer):
    """The embedding a knowledge base records (and, while it changes, its target)."""

    # The configurable providers; run-time ones (LangChain objects) cannot be chosen remotely.
    provider = serializers.ChoiceField(choices=PROVIDERS)
    model = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="Model name (openai) or directory (local); empty: the deployment's default.",
    )
    dimensions = serializers.IntegerField(
        min_value=1, max_value=16_000, required=False, allow_null=True, default=None
    )

    def validate(self, attrs: dict) -> dict:
        # An embedding is given whole, also in a PATCH of its knowledge base (which makes every
        # field optional, nested ones too): without its provider it names no model.
        if "provider" not in attrs:
            raise serializers.ValidationError({"provider": "This field is required."})
        # A local model is a directory on the server: only the deployment chooses those.
        allowed = {"", LOCAL_DEFAULT_MODEL, settings.EMBEDDING_MODEL}
        if attrs["provider"] == "local" and attrs.get("model", "") not in allowed:
            raise serializers.ValidationError(
                {
                    "model": f"The local provider uses {LOCAL_DEFAULT_MODEL} or the deployment's "
                    "EMBEDDING_MODEL; other local models are configured on the server."
                }
            )
        return attrs


class EmbeddingStateSerializer(serializers.Serializer):
    provider = serializers.CharField(source="embedding_provider")
    model = serializers.CharField(source="embedding_model")
    dimensions = serializers.IntegerField(source="embedding_dimensions", allow_null=True)
    migration = serializers.JSONField(
        source="embedding_migration",
        allow_null=True,
        help_text="While a new model re-embeds the chunks: its target and progress.",
    )


class KnowledgeBaseSerializer(serializers.ModelSerializer):
    embedding = EmbeddingStateSerializer(source="*", read_only=True)
    document_count = serializers.IntegerField(read_only=True)
    ready_document_count = serializers.IntegerField(read_only=True)
    deleting_document_count = serializers.IntegerField(
        read_only=True, help_text="Documents a bulk deletion is still removing."
    )

    class Meta:
        model = KnowledgeBase
        fields = [
            "id",
            "name",
            "description",
            "chunk_size",
            "chunk_overlap",
            "user_words",
            "embedding",
            "embedding_scripts",
            "weight_mode",
            "vector_weight",
            "keyword_weight",
            "calibrated_vector_weight",
            "calibrated_keyword_weight",
            "calibrated_at",
            "top_k",
            "candidate_multiplier",
            "score_threshold",
            "rerank_enabled",
            "rerank_top_n",
            "index_version",
            "document_count",
            "ready_document_count",
            "deleting_document_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


def _default(field: str):
    return KnowledgeBase._meta.get_field(field).default


class KnowledgeBaseWriteSerializer(serializers.ModelSerializer):
    """Create (every field but ``name`` optional) or PATCH (every field optional). Context:
    ``tenant``, and ``restricted`` for a caller limited to some knowledge bases (an API key's
    restriction), who may change every field but the name."""

    embedding = EmbeddingSerializer(
        required=False,
        help_text="At creation: the embedding to record (default: the deployment's). Later: "
        "re-embeds every chunk in the background; search keeps the old vectors until then.",
    )
    user_words = serializers.ListField(
        child=serializers.CharField(max_length=100),
        max_length=10_000,
        required=False,
        help_text="Domain words the Chinese segmenter keeps whole (changing them re-analyses "
        "the chunks in the background).",
    )
    vector_weight = FiniteFloatField(min_value=0.0, max_value=100.0, required=False)
    keyword_weight = FiniteFloatField(min_value=0.0, max_value=100.0, required=False)
    score_threshold = FiniteFloatField(
        min_value=0.0,
        max_value=1.0,
        required=False,
        allow_null=True,
        help_text="Hits scoring below it (fused score, 0-1) are dropped.",
    )

    class Meta:
        model = KnowledgeBase
        fields = [*EDITABLE_FIELDS, "embedding"]
        extra_kwargs = {
            "weight_mode": {
                "help_text": "calibrated: weights measured on the knowledge base's own chunks "
                "(the fixed ones until measured); fixed: vector_weight and keyword_weight. "
                "Setting a weight without weight_mode sets it to fixed."
            },
            "chunk_size": {"help_text": "Characters per chunk, for documents processed next."},
        }

    def validate_name(self, value: str) -> str:
        if self.instance is not None and value == self.instance.name:
            return value
        if self.context.get("restricted"):
            # Names are unique across the tenant: whether a rename went through would tell a
            # key restricted to some knowledge bases the names of the others.
            raise exceptions.PermissionDenied(
                "This API key is restricted to some knowledge bases; it cannot change a name "
                "(name): names are unique among all of the tenant's knowledge bases. Rename it "
                "signed in, or with an unrestricted key.",
                code="restricted_key",
            )
        others = access.knowledge_bases(self.context["tenant"]).filter(name=value)
        if self.instance is not None:
            others = others.exclude(pk=self.instance.pk)
        if others.exists():
            raise serializers.ValidationError("A knowledge base with this name already exists.")
        return value

    def _merged(self, attrs: dict, field: str):
        if field in attrs:
            return attrs[field]
        return getattr(self.instance, field) if self.instance is not None else _default(field)

    def validate(self, attrs: dict) -> dict:
        if self._merged(attrs, "chunk_overlap") >= self._merged(attrs, "chunk_size"):
            raise serializers.ValidationError(
                {"chunk_overlap": "chunk_overlap must be smaller than chunk_size."}
            )
        if self._merged(attrs, "vector_weight") == 0 and self._merged(attrs, "keyword_weight") == 0:
            raise serializers.ValidationError(
                {"vector_weight": "vector_weight and keyword_weight cannot both be 0."}
            )
        return attrs


# ---------------------------------------------------------------- documents


class DocumentListSerializer(serializers.ListSerializer):
    """Places in the queue of a whole page at once (two queries, not two per document)."""

    def to_representation(self, data):
        documents = list(data.all() if hasattr(data, "all") else data)
        self.child.context["queue_positions"] = queue_positions(documents)
        return super().to_representation(documents)


class DocumentSerializer(serializers.ModelSerializer):
    queue_position = serializers.SerializerMethodField(
        help_text="While pending: 0 once sent to a worker (it starts when one is free), else "
        "its place in the fair queue across tenants (1 = next). Null otherwise."
    )
    knowledge_base_id = serializers.IntegerField(read_only=True)
    replaces_id = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="An upload with replace=true: the earlier document of the same file name it "
        "replaces once it is ready.",
    )
    parent_id = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="An e-mail attachment: the message it came with (deleting the message "
        "deletes it).",
    )
    source_url = serializers.CharField(
        read_only=True, help_text="The URL a document from the web was fetched from; empty else."
    )

    class Meta:
        model = Document
        fields = [
            "id",
            "knowledge_base_id",
            "title",
            "original_filename",
            "file_type",
            "size_bytes",
            "sha256",
            "status",
            "progress",
            "error",
            "metadata",
            "chunk_count",
            "replaces_id",
            "parent_id",
            "options",
            "source_url",
            "enabled",
            "queue_position",
            "created_at",
            "updated_at",
            "processed_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "progress": {
                "help_text": "0-100; moves with each page read by OCR and each embedding request."
            },
            "options": {"help_text": "How the file is read, as set at upload (Q&A pairs)."},
            "error": {"help_text": "Why processing failed, for the person who uploaded it."},
            "enabled": {
                "help_text": "false: kept and listed, never returned by search (PATCH to change)."
            },
        }
        list_serializer_class = DocumentListSerializer

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_queue_position(self, document: Document) -> int | None:
        positions = self.context.get("queue_positions") or {}
        if document.pk not in positions:
            positions = queue_positions([document])
        return positions[document.pk]


class DocumentUpdateSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(
        help_text="false: the document stays, is never returned by search; true: searched again."
    )


class ReprocessSerializer(serializers.Serializer):
    discard_hand_edits = serializers.BooleanField(
        default=False,
        help_text="Reprocess even though parsed chunks carry hand edits (they are discarded; "
        "chunks added by hand are kept). Without it such a document answers 409 with "
        "details.hand_edits.",
    )


class DocumentUploadSerializer(serializers.Serializer):
    files = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True, use_url=False),
        required=False,
        default=list,
        max_length=settings.RAG_MAX_UPLOAD_FILES,
        help_text="One or more files (repeat the form field). Accepted types: "
        f"{ACCEPTED_EXTENSIONS}, and .zip archives of them (each file judged as an upload, its "
        "path kept in metadata); at most RAG_MAX_UPLOAD_BYTES each. All or nothing: one file "
        "refused and nothing is stored. Scanned PDF pages and images are read by OCR; an "
        "e-mail's attachments become documents of their own.",
    )
    # Web import (knowledge.web): documents fetched from URLs by the worker.
    urls = serializers.ListField(
        child=serializers.CharField(max_length=2000),
        required=False,
        default=list,
        max_length=settings.RAG_MAX_UPLOAD_FILES,
        help_text="http(s) URLs to fetch, each a document (JSON or form; `url` for one). The "
        "worker fetches them: status `fetching`, then processing as for files. Addresses that "
        "are not public are refused unless RAG_WEB_ALLOWED_HOSTS names them.",
    )
    url = serializers.CharField(max_length=2000, required=False, help_text="One URL to fetch.")
    replace = serializers.BooleanField(
        default=False,
        help_text="A file already in the knowledge base is processed again instead of "
        "refused; an earlier document of the same file name is replaced once the new one is "
        "ready.",
    )
    metadata = JSONObjectField(
        required=False,
        default=dict,
        help_text="Metadata for every uploaded document (and its chunks), usable in search "
        'filters. Multipart: its JSON text, e.g. {"project": "apollo"}.',
    )
    qa_pairs = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Tables (.csv, .xlsx): read as question/answer pairs, one chunk per pair, the "
        "question searchable and the answer returned. Unset: when the header has a question "
        "column (question, q, 问题, 问...) and an answer column (answer, a, 答案, 答, 回答...). "
        "false: always as rows.",
    )
    qa_question_column = serializers.CharField(
        required=False,
        default="",
        max_length=200,
        help_text="The header of the question column, when it has another name (implies qa_pairs).",
    )
    qa_answer_column = serializers.CharField(
        required=False,
        default="",
        max_length=200,
        help_text="The header of the answer column, when it has another name (implies qa_pairs).",
    )

    def validate(self, attrs: dict) -> dict:
        if attrs.get("url"):
            attrs["urls"] = [*attrs["urls"], attrs.pop("url")]
        if not attrs["files"] and not attrs["urls"]:
            raise serializers.ValidationError(
                {"files": "Send one or more files, or one or more URLs (url or urls)."}
            )
        named = attrs["qa_question_column"] or attrs["qa_answer_column"]
        if named and attrs["qa_pairs"] is False:
            raise serializers.ValidationError(
                {"qa_pairs": "qa_pairs=false contradicts naming the Q&A columns."}
            )
        return attrs

    def parse_options(self) -> dict:
        """The options to store on each document (only those that were set)."""
        data = self.validated_data
        return {
            key: data[key]
            for key in ("qa_pairs", "qa_question_column", "qa_answer_column")
            if data[key] not in (None, "")
        }


class UploadResultSerializer(serializers.Serializer):
    file = serializers.CharField(
        help_text="The file name as uploaded, archive.zip/path of an archive's member, or the "
        "URL given."
    )
    outcome = serializers.ChoiceField(
        choices=[outcome.value for outcome in Outcome],
        help_text="skipped: an archive entry that is not an upload (a folder, __MACOSX or a "
        "hidden file, a path with .. or absolute, a link, a type not accepted), with the "
        "reason in error.",
    )
    document_id = serializers.IntegerField(
        allow_null=True, help_text="The created document, or for a duplicate the existing one."
    )
    error = ErrorDetailSerializer(allow_null=True)


class UploadResponseSerializer(serializers.Serializer):
    documents = DocumentSerializer(many=True, help_text="The accepted documents (pending).")
    results = UploadResultSerializer(many=True, help_text="One per file, in upload order.")


# ---------------------------------------------------------------- chunks


class ChunkSerializer(serializers.ModelSerializer):
    document_id = serializers.IntegerField(read_only=True)
    knowledge_base_id = serializers.IntegerField(read_only=True)
    document_title = serializers.CharField(source="document.title", read_only=True)
    has_embedding = serializers.SerializerMethodField()
    tokens = serializers.SerializerMethodField(
        help_text="The analysed tokens BM25 indexes; null unless include_tokens=true."
    )

    class Meta:
        model = Chunk
        fields = [
            "id",
            "document_id",
            "knowledge_base_id",
            "document_title",
            "position",
            "content",
            "start_char",
            "end_char",
            "page",
            "heading_path",
            "metadata",
            "embedding_model",
            "embedding_dimensions",
            "has_embedding",
            "tokens",
            "origin",
            "enabled",
            "edited",
            "edited_at",
            "extra_keywords",
            "extra_questions",
            "created_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "origin": {"help_text": "parsed from the file, or manual (added by hand)."},
            "enabled": {"help_text": "false: kept and listed, never returned by search."},
            "extra_keywords": {"help_text": "Searched by keyword, never shown as content."},
            "extra_questions": {
                "help_text": "Searched by keyword and embedded with the chunk, never shown as "
                "content."
            },
        }

    edited = serializers.BooleanField(
        read_only=True, help_text="Its text, keywords or questions were changed by hand."
    )

    def get_has_embedding(self, chunk: Chunk) -> bool:
        return chunk.embedding_dimensions is not None

    @extend_schema_field(serializers.ListField(child=serializers.CharField(), allow_null=True))
    def get_tokens(self, chunk: Chunk) -> list[str] | None:
        return list(chunk.tokens) if self.context.get("include_tokens") else None


_KEYWORDS = serializers.ListField(
    child=serializers.CharField(max_length=200, allow_blank=True),
    max_length=50,
    required=False,
    help_text="Extra keywords (replace the chunk's): indexed for keyword search, not shown.",
)
_QUESTIONS = serializers.ListField(
    child=serializers.CharField(max_length=1000, allow_blank=True),
    max_length=50,
    required=False,
    help_text="Questions the chunk answers (replace the chunk's): indexed and embedded with "
    "it, not shown.",
)


class ChunkUpdateSerializer(serializers.Serializer):
    """PATCH a chunk: any of these; the chunk is re-analysed and, for new text or questions,
    re-embedded before the answer."""

    content = serializers.CharField(required=False, max_length=20_000, trim_whitespace=True)
    enabled = serializers.BooleanField(required=False)
    extra_keywords = _KEYWORDS
    extra_questions = _QUESTIONS

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError(
                "Nothing to change: give content, enabled, extra_keywords or extra_questions."
            )
        return attrs


class ChunkCreateSerializer(serializers.Serializer):
    content = serializers.CharField(max_length=20_000, trim_whitespace=True)
    enabled = serializers.BooleanField(default=True)
    extra_keywords = _KEYWORDS
    extra_questions = _QUESTIONS
