"""The data model of knowledge: knowledge bases, documents and chunks, under a tenant
(``tenancy.models.Tenant``).

Every row below a tenant carries its tenant id, and chunks carry their knowledge base id too, so
both search legs filter without joins and no query can forget the tenant. Writes go through
``knowledge.services``; reads through ``knowledge.selectors`` and ``knowledge.access``.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from knowledge.embeddings.coverage import parse_scripts
from tenancy.models import ApiKey, Tenant


def validate_scripts(value: str) -> None:
    try:
        parse_scripts(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class KnowledgeBase(models.Model):
    """A searchable collection of documents with its own chunking, embedding and retrieval
    settings. ``index_version`` increases with every change to its documents; caches of its
    BM25 index are keyed by it, so no process serves an index older than the data."""

    class EmbeddingProvider(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible HTTP API"
        LOCAL = "local", "Local sentence-transformers model"
        HASH = "hash", "Hash (deterministic, not semantic: tests and development only)"
        LANGCHAIN = "langchain", "LangChain Embeddings registered in the process using it"
        NONE = "none", "None (keyword search only)"

    class WeightMode(models.TextChoices):
        CALIBRATED = "calibrated", "Calibrated from the knowledge base's own chunks"
        FIXED = "fixed", "Fixed weights"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_bases")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)

    # chunking and analysis
    chunk_size = models.PositiveIntegerField(
        default=1500, validators=[MinValueValidator(100), MaxValueValidator(20_000)]
    )
    chunk_overlap = models.PositiveIntegerField(default=150, validators=[MaxValueValidator(5_000)])
    user_words = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        help_text="Domain words the Chinese segmenter keeps whole in this knowledge base only.",
    )

    # embedding: recorded at creation; chunks record theirs, vectors of another model or
    # dimension are never compared.
    embedding_provider = models.CharField(
        max_length=10, choices=EmbeddingProvider.choices, default=EmbeddingProvider.NONE
    )
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_dimensions = models.PositiveIntegerField(null=True, blank=True)
    # The scripts the model embeds meaningfully (knowledge.embeddings.coverage): "*", a list
    # such as "latin, han", or empty for what the model declares. A query mostly in other
    # scripts is searched without the vector leg unless the request sets the weights.
    embedding_scripts = models.CharField(
        max_length=100,
        blank=True,
        validators=[validate_scripts],
        help_text="Scripts the embedding model embeds meaningfully: * (all), or some of latin, "
        "han, kana, hangul, cyrillic, arabic, other, comma-separated. Empty: what the model "
        "declares (all-MiniLM-L6-v2 and other English models: latin; others: all).",
    )
    # While a change of model is re-embedding in the background: the target configuration
    # ({"provider", "model", "dimensions"}) and progress. Search keeps using the fields above
    # until the new vectors replace the old ones in one step.
    embedding_migration = models.JSONField(null=True, blank=True)

    # retrieval defaults, overridable per query
    weight_mode = models.CharField(
        max_length=10, choices=WeightMode.choices, default=WeightMode.CALIBRATED
    )
    vector_weight = models.FloatField(default=0.6, validators=[MinValueValidator(0.0)])
    keyword_weight = models.FloatField(default=0.4, validators=[MinValueValidator(0.0)])
    calibrated_vector_weight = models.FloatField(null=True, blank=True)
    calibrated_keyword_weight = models.FloatField(null=True, blank=True)
    calibrated_at = models.DateTimeField(null=True, blank=True)
    # What the last calibration measured (per-leg MRR on pseudo-queries, sample size...).
    calibration = models.JSONField(null=True, blank=True)
    top_k = models.PositiveIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    candidate_multiplier = models.PositiveIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(50)]
    )
    score_threshold = models.FloatField(null=True, blank=True)
    rerank_enabled = models.BooleanField(default=False)
    rerank_top_n = models.PositiveIntegerField(
        default=20, validators=[MinValueValidator(1), MaxValueValidator(200)]
    )

    index_version = models.BigIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # API keys restricted to this knowledge base (``api_key.knowledge_bases``; a key with none
    # may use every knowledge base of its tenant). Declared here so tenancy need not know this
    # model; the table is the one the key's side of the relation used to create.
    restricted_api_keys = models.ManyToManyField(
        ApiKey,
        blank=True,
        related_name="knowledge_bases",
        db_table="knowledge_apikey_knowledge_bases",
    )

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="kb_unique_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(chunk_overlap__lt=models.F("chunk_size")),
                name="kb_overlap_below_size",
            ),
        ]

    def __str__(self) -> str:
        return self.name


def document_upload_path(instance: Document, filename: str) -> str:
    """Generated storage name: never the uploader's file name (which may hold ``../`` or
    control characters); the original name is kept in ``original_filename`` for display."""
    import uuid

    return f"documents/{instance.tenant_id}/{instance.knowledge_base_id}/{uuid.uuid4().hex}"


class Document(models.Model):
    """One uploaded file and its processing state."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        FETCHING = "fetching", "Fetching"  # a document from a URL (knowledge.web)
        PARSING = "parsing", "Parsing"
        CHUNKING = "chunking", "Chunking"
        EMBEDDING = "embedding", "Embedding"
        INDEXING = "indexing", "Indexing"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"

        @classmethod
        def final(cls) -> tuple[str, ...]:
            return (cls.READY, cls.FAILED)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="documents")
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="documents"
    )
    title = models.CharField(max_length=500)
    original_filename = models.CharField(max_length=255)
    file = models.FileField(upload_to=document_upload_path, max_length=255)
    file_type = models.CharField(max_length=10, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    error = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    # An upload with replace=true replaces the earlier document of the same file name only when
    # it is ready itself, so search never loses the old version to a failed new one.
    replaces = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # An e-mail's attachment is a document of its own, linked to the message: it goes when the
    # message is deleted (as the user expects), and the link cannot go stale as metadata could.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    # How the file is read, as chosen at upload (knowledge.ingestion.parsing.ParseOptions:
    # qa_pairs, qa_question_column, qa_answer_column); kept for reprocessing.
    options = models.JSONField(default=dict, blank=True)
    # Web import (knowledge.web): the URL the document was fetched from. A document from a URL
    # is created without a file; processing fetches it first (status ``fetching``).
    source_url = models.URLField(max_length=2000, blank=True)
    analyzer_version = models.PositiveSmallIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Curation: a disabled document is kept, listed and reversible, but never searched
    # (``knowledge.selectors.SEARCHABLE_CHUNK`` is the one definition of what is searched).
    enabled = models.BooleanField(default=True, db_default=True)
    # Set (with enabled=False) when a bulk deletion is asked for; a task deletes the row and its
    # file in batches, and the reaper queues that task again if it was lost.
    delete_requested_at = models.DateTimeField(null=True, blank=True)
    # When the fair dispatcher (knowledge.services.dispatch) sent it to a worker; empty while
    # it waits in the database for its tenant's turn.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # When the document's searchable chunks last changed (processing, and every curation write
    # to it): the BM25 segments and the vector matrix reload changed documents by it.
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "sha256"], name="document_unique_sha256_per_kb"
            ),
            models.CheckConstraint(condition=Q(progress__lte=100), name="document_progress_le_100"),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "knowledge_base", "status"], name="document_tenant_kb_status"
            ),
            models.Index(fields=["status", "updated_at"], name="document_status_updated"),
            GinIndex(fields=["metadata"], name="document_metadata_gin"),
            # The searchable documents' stamps, read after every change by each process
            # catching up (retrieval.core.stamps) and by the index builds
            # (retrieval.bm25store.build): an index-only scan of a few pages instead of a scan of
            # the table. The condition is knowledge.selectors.SEARCHABLE_DOCUMENT.
            models.Index(
                fields=["tenant", "knowledge_base", "id"],
                include=["processed_at", "analyzer_version", "chunk_count"],
                condition=Q(status="ready", enabled=True),
                name="document_searchable_stamps",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A searchable span of a document: its text, analysed tokens (BM25 rebuilds read these
    and never re-run the analyser) and embedding, with where it came from for citations.

    Curation (``knowledge.services.curation``) may edit its text, add extra keywords and
    questions (in ``tokens`` and, the questions, in what is embedded, never in ``content``),
    disable it, or add a chunk by hand (``origin`` manual)."""

    class Origin(models.TextChoices):
        PARSED = "parsed", "Parsed from the file"
        MANUAL = "manual", "Added by hand"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    position = models.PositiveIntegerField()
    content = models.TextField()
    tokens = ArrayField(models.TextField(), default=list, blank=True)
    analyzer_version = models.PositiveSmallIntegerField(default=0)
    # No fixed dimension: a knowledge base chooses its model; indexes are per dimension.
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_dimensions = models.PositiveIntegerField(null=True, blank=True)
    start_char = models.PositiveIntegerField(default=0)
    end_char = models.PositiveIntegerField(default=0)
    page = models.PositiveIntegerField(null=True, blank=True)
    heading_path = ArrayField(models.TextField(), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Database defaults too: bulk writers that name their columns (bench's COPY) leave these out.
    origin = models.CharField(
        max_length=6, choices=Origin.choices, default=Origin.PARSED, db_default=Origin.PARSED
    )
    enabled = models.BooleanField(default=True, db_default=True)
    extra_keywords = ArrayField(
        models.CharField(max_length=200), default=list, db_default=[], blank=True
    )
    extra_questions = ArrayField(
        models.CharField(max_length=1000), default=list, db_default=[], blank=True
    )
    # Set when the text, keywords or questions were changed by hand (not by enabling).
    edited_at = models.DateTimeField(null=True, blank=True)
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["document_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "position"], name="chunk_unique_position_per_document"
            ),
            models.CheckConstraint(
                condition=Q(end_char__gte=models.F("start_char")), name="chunk_offsets_ordered"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "knowledge_base"], name="chunk_tenant_kb"),
            models.Index(fields=["knowledge_base", "id"], name="chunk_kb_id"),
            # A document's chunks: deleting or reprocessing it, BM25 deltas and the vector
            # matrix's delta fetch them; without it each is a scan of the knowledge base.
            models.Index(fields=["document", "position"], name="chunk_document_position"),
            GinIndex(fields=["metadata"], name="chunk_metadata_gin"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"

    @property
    def edited(self) -> bool:
        return self.edited_at is not None


class StagedEmbedding(models.Model):
    """A chunk's vector under a knowledge base's next embedding model, computed in the
    background and swapped into ``Chunk.embedding`` for the whole knowledge base at once."""

    chunk = models.OneToOneField(
        Chunk, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="+")
    embedding = VectorField()
    embedding_model = models.CharField(max_length=200)

    def __str__(self) -> str:
        return f"staged {self.embedding_model} vector of chunk {self.chunk_id}"


# Web sources and their pages (knowledge.web), registered with this app.
from knowledge.web.models import WebPage, WebSource  # noqa: E402, F401
