"""A knowledge base's composed view of one manifest, and what BM25Store.get returns: a view
and how it was obtained."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from retrieval.bm25.segment import Segment
from retrieval.bm25.segmented import SegmentedIndex
from retrieval.bm25store.manifest import Manifest
from retrieval.bm25store.payload import SignedPayload
from retrieval.core.identity import Identity


@dataclass(frozen=True)
class View:
    """What L1 holds for a knowledge base: a manifest, its segments and their composed view."""

    manifest: Manifest
    segments: dict[str, Segment]
    index: SegmentedIndex
    signature: str = ""  # of the stored manifest it was read from ("" if built here)

    @property
    def version(self) -> int:
        return self.manifest.version

    @cached_property
    def nbytes(self) -> int:
        return self.index.total_nbytes


def compose(
    manifest: Manifest,
    segments: dict[str, Segment],
    signature: str = "",
    previous: View | None = None,
) -> View:
    """The view of ``manifest``, on ``previous`` (an older view of the same knowledge base)."""
    ordered = [segments[key] for key in manifest.keys]
    index = SegmentedIndex(
        ordered,
        deleted_per_segment=manifest.deletions(),
        previous=previous.index if previous is not None else None,
        dead_frequencies=manifest.dead_frequencies(),
    )
    return View(manifest, {key: segments[key] for key in manifest.keys}, index, signature)


def sealed_view(identity: Identity, view: View) -> tuple[View, SignedPayload]:
    """The view with its manifest recording the view's dead frequencies, and its payload."""
    manifest = view.manifest.with_dead(view.index.dead_frequencies())
    payload = manifest.seal(identity)
    return replace(view, manifest=manifest, signature=payload.signature), payload


class Tier(StrEnum):
    L1 = "l1"
    L2 = "l2"
    L3 = "l3"
    BUILD = "build"


@dataclass(frozen=True)
class IndexHandle:
    """An index and how it was obtained, for the search trace."""

    index: SegmentedIndex
    knowledge_base_id: int
    version: int
    tier: Tier  # where it came from: l1, l2, l3 or build
    load_ms: float  # the whole get(), version check, waiting and building included
    build_ms: float = 0.0  # fetching tokens and building, when tier is build
    waited_ms: float = 0.0  # spent waiting for another process's build
    waited_for_build: bool = False  # another process held the build lock
    wait_timed_out: bool = False  # ... and did not finish in time, so this get built it too
    l2_available: bool = True  # False while Redis is unreachable
    rejected: tuple[str, ...] = ()  # tiers whose payload failed its integrity check
    view: View | None = None  # the manifest and segments behind ``index``
    built: str = ""  # "full" or "delta" when tier is build
    loaded_segments: int = 0  # segments fetched from L2/L3 (the others were held already)
    stale: bool = False  # an older version, served while another process builds the asked one
    deferred: bool = False  # stale because the worker builds the asked version (not waited)
    asked_version: int = 0  # the version asked for (``version`` is older when stale)

    def trace(self) -> dict[str, Any]:
        return {
            "tier": str(self.tier),
            "version": self.version,
            "chunks": len(self.index),
            "load_ms": round(self.load_ms, 3),
            "build_ms": round(self.build_ms, 3),
            "waited_ms": round(self.waited_ms, 3),
            "waited_for_build": self.waited_for_build,
            "wait_timed_out": self.wait_timed_out,
            "l2_available": self.l2_available,
            "rejected": list(self.rejected),
            "built": self.built,
            "segments": len(self.view.manifest.keys) if self.view else 0,
            "deleted": int(self.view.manifest.deleted.size) if self.view else 0,
            "loaded_segments": self.loaded_segments,
            "stale": self.stale,
            "deferred": self.deferred,
            "asked_version": self.asked_version,
        }
