"""The ``local`` provider: a sentence-transformers CrossEncoder loaded from a local directory.

Never downloaded: ``RERANK_MODEL`` must be a directory holding a saved cross-encoder (what
``save_pretrained`` of transformers or sentence-transformers writes, e.g. a copy of
``cross-encoder/ms-marco-MiniLM-L6-v2`` or ``BAAI/bge-reranker-base``). Loaded once per process,
on the CPU.

Scores: a one-output model's logit goes through a sigmoid, whatever activation the model saved
(ms-marco models save none), so every model scores in (0, 1) like Cohere, Jina and TEI do and a
threshold means the same across providers. A model with several outputs is read as classes and
scores the softmax probability of the last one, "relevant" in binary rerankers.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge.embeddings.local import offline_hub

from .base import RerankError

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

BATCH_SIZE = 32
_models: dict[Path, tuple[CrossEncoder, threading.Lock]] = {}
_load_lock = threading.Lock()


def resolve_model_path(model: str) -> Path:
    path = Path(model).expanduser() if model else None
    if path is None or not path.is_dir():
        raise RerankError(
            f"RERANK_MODEL {model!r} is not a directory; the local reranker loads a saved "
            "cross-encoder from disk and never downloads one (copy the model's files into a "
            "directory and set RERANK_MODEL to its path)"
        )
    return path.resolve()


def _load(path: Path) -> tuple[CrossEncoder, threading.Lock]:
    with _load_lock:
        if path not in _models:
            offline_hub()
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:
                raise RerankError(
                    "sentence-transformers is not installed; pip install -r requirements-local.txt"
                ) from exc
            try:
                model = CrossEncoder(str(path), device="cpu", local_files_only=True)
            except Exception as exc:  # the library raises many types for a bad directory
                raise RerankError(
                    f"could not load a cross-encoder from {path}: {exc}"[:500]
                ) from exc
            # One inference at a time per model: a fast tokenizer used by two threads at once
            # fails with "Already borrowed" (huggingface/tokenizers#537).
            _models[path] = (model, threading.Lock())
        return _models[path]


class LocalReranker:
    def __init__(self, model: str) -> None:
        path = resolve_model_path(model)
        self.name = f"local:{path}"
        self._model, self._lock = _load(path)

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        import torch

        model = self._model
        pairs = [(query, document) for document in documents]
        single = model.num_labels == 1
        try:
            with self._lock:
                scores = model.predict(
                    pairs,
                    batch_size=BATCH_SIZE,
                    activation_fn=torch.nn.Sigmoid() if single else torch.nn.Identity(),
                    apply_softmax=not single,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
        except Exception as exc:
            raise RerankError(f"the local reranker {self.name} failed: {exc}"[:500]) from exc
        if not single:
            scores = scores[:, -1]
        return [float(score) for score in scores]
