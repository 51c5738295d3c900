"""A knowledge base's vector matrix as files under RAG_DATA_DIR, memory-mapped by every process.

Four gunicorn workers that each load a 300k-chunk matrix hold four private copies (442 MB
each). Written once to disk and mapped read-only, the same pages sit once in the host's page
cache and every process maps them: the matrix is held once per host.

A **base** is the matrix at one version, written by whichever process needs it first:
``<VECTOR_HOST_DIR>/<tenant>/<kb>-<epoch>/<stamp>-v<version>.{ids,docs,vec}.npy`` plus a
``.json`` written last (its presence says the base is complete): the version, the knowledge
base row's stamp (updated_at, provider, model, dimension: a different stamp means other
vectors) and each document's ``processed_at``. Every file is written under a temporary name in
the same directory, flushed and renamed into place (atomic on POSIX), so a reader never maps a
half-written file. Arrays are plain ``.npy`` read with ``allow_pickle=False``; the path is made
of integers from the knowledge base row, never of input.

A base of ``VECTOR_IVF_MIN_ROWS`` rows or more (300k) is written with an inverted file
(``retrieval.vector.ivf``, built and calibrated by the writer, under the lock): its rows are
stored list by list instead of by id, so a probed list is one slice of the mapped matrix, and
three more files come with it, ``.centroids.npy`` (the lists' unit centroids), ``.offsets.npy``
(where each list starts) and ``.order.npy`` (the rows by ascending id, for filtered searches
and every lookup by id); the ``.json`` records the lists, the calibrated number probed, the
recall measured there and the build's seconds. Its ``ivf`` entry says the three files must be
there and match (shapes, the offsets covering the rows, the order sorting the ids); a base
without one (smaller, or written by a release without IVFs) is searched exactly. With
``VECTOR_IVF_CODES`` two more files come with an IVF, ``.codes.npy`` (the rows as int8 codes,
in the same order) and ``.scales.npy`` (each row's scale), and the ``ivf`` entry says
``"codes": "int8"`` (``retrieval.vector.ivf.quantize``); a base without them scores every
probed row. With codes and ``VECTOR_IVF_FLOAT16`` the rows themselves (``.vec.npy``) are
float16 (``"row_type": "float16"``; the codes are those of the rounded rows, so their bounds
hold for the rows scored): the codes spare a search converting all but ~limit of them, and the
host holds 0.75x of one float32 copy instead of 1.25x. Otherwise (or with no ``row_type`` in
the header) the rows are float32.

A base is never trusted beyond what the database says: the matrix built on it drops every row
whose document is not among the knowledge base's searchable documents with the same
``processed_at`` now, and fetches the rest (``retrieval.vector.matrix.load``). A base whose
files do not match (shape, sizes) is ignored and replaced. Rows changed since a base stay in
each process's private memory until they pass ``REBASE_FRACTION`` of the base; then one process
(a non-blocking lock per knowledge base: the others keep their private rows meanwhile) writes a
new base, in a thread beside its searches (``retrieval.vector.matrix.rebase_in_background``),
and deletes older ones (unlinking a mapped file is safe on Linux: mappings stay valid
until unmapped).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from retrieval.core.stamps import Stamps
from retrieval.vector.ivf import Ivf, quantize
from retrieval.vector.ivf import build as build_ivf

logger = logging.getLogger(__name__)

# A process rewrites the base once its private rows (changed since) or the base's dead rows
# pass this fraction of the base.
REBASE_FRACTION = 0.1


@dataclass(frozen=True)
class Base:
    name: str
    version: int
    ids: np.ndarray  # int64, ascending, or list by list with an IVF (memory-mapped)
    documents: np.ndarray  # int64 (memory-mapped)
    vectors: np.ndarray  # float32 (rows, dimensions), unit rows; float16 with an IVF (mapped)
    processed: Stamps  # its documents and their processed_at then
    order: np.ndarray | None = None  # with an IVF: the rows by ascending id (memory-mapped)
    ivf: Ivf | None = None


_LOCK_POLL_S = 0.05
_WRITE_BLOCK_ROWS = 65_536


def enabled() -> bool:
    return bool(settings.VECTOR_HOST_FILES)


def directory(tenant_id: int, knowledge_base_id: int, epoch: int) -> Path:
    return (
        Path(settings.VECTOR_HOST_DIR)
        / str(int(tenant_id))
        / (f"{int(knowledge_base_id)}-{int(epoch)}")
    )


def stamp_key(stamp: tuple) -> str:
    return hashlib.sha256(repr(tuple(str(part) for part in stamp)).encode()).hexdigest()[:16]


def newest(folder: Path, stamp: tuple, dimensions: int) -> Base | None:
    """The newest complete base of this stamp in ``folder``, mapped; None if there is none
    that checks out."""
    key = stamp_key(stamp)
    candidates = []
    for meta in folder.glob(f"{key}-v*.json") if folder.is_dir() else ():
        try:
            candidates.append((int(meta.stem.rsplit("-v", 1)[1]), meta))
        except ValueError:
            continue
    for version, meta in sorted(candidates, reverse=True):
        base = _open(meta, version, dimensions)
        if base is not None:
            return base
    return None


def _open(meta: Path, version: int, dimensions: int) -> Base | None:
    stem = meta.with_suffix("")
    try:
        header = json.loads(meta.read_text())
        ids = _load(stem, "ids")
        documents = _load(stem, "docs")
        vectors = _load(stem, "vec")
        rows = int(header.get("rows", -1))
        order = index = None
        row_type = np.float32
        if header.get("ivf") is not None:  # written with an IVF: its files must check out
            # float16 rows: VECTOR_IVF_FLOAT16 (a header naming no row type: float32)
            row_type = np.float16 if header["ivf"].get("row_type") == "float16" else np.float32
            order = _load(stem, "order")
            index = _opened_ivf(stem, header["ivf"], rows, dimensions)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        logger.warning("vector base %s unreadable (%s); ignoring it", stem, exc)
        return None
    if (
        header.get("version") != version
        or ids.dtype != np.int64
        or documents.dtype != np.int64
        or vectors.dtype != row_type
        or ids.shape != (rows,)
        or documents.shape != (rows,)
        or vectors.shape != (rows, dimensions)
        or (order is not None and not _orders(order, ids))
    ):
        logger.warning("vector base %s does not match its header; ignoring it", stem)
        return None
    processed = Stamps.from_mapping(header.get("processed", {}))
    return Base(stem.name, version, ids, documents, vectors, processed, order, index)


def _load(stem: Path, suffix: str) -> np.ndarray:
    return np.load(f"{stem}.{suffix}.npy", mmap_mode="r", allow_pickle=False)


def _opened_ivf(stem: Path, header: dict, rows: int, dimensions: int) -> Ivf:
    """The IVF of a base, checked against its header and the base's rows (ValueError if it
    does not match: the base is ignored like any other damaged one)."""
    lists, probes = int(header["lists"]), int(header["probes"])
    centroids, offsets = _load(stem, "centroids"), _load(stem, "offsets")
    if (
        not 1 <= probes <= lists
        or centroids.dtype != np.float32
        or centroids.shape != (lists, dimensions)
        or offsets.dtype != np.int64
        or offsets.shape != (lists + 1,)
        or offsets[0] != 0
        or offsets[-1] != rows
        or np.any(np.diff(offsets) < 0)
    ):
        raise ValueError("its IVF does not match its header")
    codes = scales = None
    if header.get("codes") == "int8":  # bases written without codes are scored on float32
        codes, scales = _load(stem, "codes"), _load(stem, "scales")
        if (
            codes.dtype != np.int8
            or codes.shape != (rows, dimensions)
            or scales.dtype != np.float32
            or scales.shape != (rows,)
        ):
            raise ValueError("its codes do not match its header")
        codes, scales = np.asarray(codes), np.asarray(scales)  # plain views: cheap slices
    return Ivf(
        centroids,
        offsets,
        probes,
        float(header["recall"]),
        float(header["build_s"]),
        float(header.get("scan_share", 0.0)),  # 0: not in the header, not recorded
        codes,
        scales,
    )


def _orders(order: np.ndarray, ids: np.ndarray) -> bool:
    """Whether ``order`` lists the rows by strictly ascending id (so it is a permutation of
    them; a pass over the rows, once per process that maps the base)."""
    if order.dtype != np.int64 or order.shape != ids.shape:
        return False
    if not len(order):
        return True
    if int(order.min()) < 0 or int(order.max()) >= len(ids):
        return False
    return bool(np.all(np.diff(ids[order]) > 0))


def write(
    folder: Path,
    stamp: tuple,
    version: int,
    ids: np.ndarray,
    documents: np.ndarray,
    vectors: np.ndarray,
    processed: Stamps,
) -> Base | None:
    """Write a base of these rows (ids ascending) unless another process is writing one for
    this knowledge base (then None: keep the rows in memory this time), map it back, and delete
    older bases. From ``VECTOR_IVF_MIN_ROWS`` rows on, with an IVF (``retrieval.vector.ivf``):
    the rows are stored list by list, beside the lists' centroids and offsets and the rows'
    order by id."""
    folder.mkdir(parents=True, exist_ok=True)
    with _writer_lock(folder) as locked:
        if not locked:
            return None
        stem = folder / f"{stamp_key(stamp)}-v{version}"
        header: dict[str, Any] = {
            "version": version,
            "rows": len(ids),
            "stamp": [str(part) for part in stamp],
            "processed": processed.to_mapping(),
        }
        permutation, half = None, False
        if 0 < settings.VECTOR_IVF_MIN_ROWS <= len(ids):
            # float16 rows only with codes: the codes spare a search converting most of them
            half = bool(settings.VECTOR_IVF_FLOAT16 and settings.VECTOR_IVF_CODES)
            built = build_ivf(vectors, settings.VECTOR_IVF_TARGET_RECALL)
            permutation = built.permutation
            stored_ids = np.asarray(ids)[permutation]
            _write_atomically(Path(f"{stem}.order.npy"), np.argsort(stored_ids, kind="stable"))
            _write_atomically(Path(f"{stem}.centroids.npy"), built.ivf.centroids)
            _write_atomically(Path(f"{stem}.offsets.npy"), built.ivf.offsets)
            if settings.VECTOR_IVF_CODES:
                _write_codes(stem, vectors, permutation, half)
            header["ivf"] = {
                "lists": built.ivf.lists,
                "probes": built.ivf.probes,
                "recall": round(built.ivf.recall, 4),
                "target_recall": settings.VECTOR_IVF_TARGET_RECALL,
                "build_s": round(built.ivf.build_s, 2),
                "scan_share": round(built.ivf.scan_share, 4),
                "row_type": "float16" if half else "float32",
            }
            if settings.VECTOR_IVF_CODES:
                header["ivf"]["codes"] = "int8"
            logger.info(
                "vector base %s: IVF of %d lists, %d probed for recall@10 %.3f (target %.3f) "
                "on its own rows, scanning %.1f%% of them, built in %.1f s",
                stem.name,
                built.ivf.lists,
                built.ivf.probes,
                built.ivf.recall,
                settings.VECTOR_IVF_TARGET_RECALL,
                100 * built.ivf.scan_share,
                built.ivf.build_s,
            )
        for suffix, array in (("ids", ids), ("docs", documents)):
            _write_atomically(Path(f"{stem}.{suffix}.npy"), array, permutation)
        rows_of = _half if half else None
        _write_atomically(Path(f"{stem}.vec.npy"), vectors, permutation, rows_of)
        _write_atomically(stem.with_suffix(".json"), json.dumps(header).encode())
        base = _open(stem.with_suffix(".json"), version, int(vectors.shape[1]))
        if base is not None:
            _remove_older(folder, keep=stem.name)
        return base


def _half(rows: np.ndarray) -> np.ndarray:
    return rows.astype(np.float16)


def _write_codes(stem: Path, vectors: np.ndarray, permutation: np.ndarray, half: bool) -> None:
    """The rows' int8 codes and scales (``quantize``), in stored order: one pass over the
    permuted blocks writes the codes and gathers the scales, written next. With ``half`` the
    codes are those of the rows rounded to float16, the rows a search scores: their bounds
    hold for those."""
    scales: list[np.ndarray] = []

    def codes_of(rows: np.ndarray) -> np.ndarray:
        codes, row_scales = quantize(_half(rows) if half else rows)
        scales.append(row_scales)  # (the empty block that tells the dtype adds nothing)
        return codes

    _write_atomically(Path(f"{stem}.codes.npy"), vectors, permutation, codes_of)
    _write_atomically(Path(f"{stem}.scales.npy"), np.concatenate(scales))


def _write_atomically(
    path: Path,
    data: np.ndarray | bytes,
    permutation: np.ndarray | None = None,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> None:
    """``data`` (its rows in ``permutation``'s order when given, each block of them through
    ``transform`` when given) to ``path``, whole or not at all. Permuted rows are written a
    block at a time: no second copy of a large matrix."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        if isinstance(data, bytes):
            handle.write(data)
        elif permutation is None:
            np.save(handle, np.ascontiguousarray(data), allow_pickle=False)
        else:
            dtype = transform(data[:0]).dtype if transform else data.dtype
            header = {"descr": np.lib.format.dtype_to_descr(dtype)}
            header |= {"fortran_order": False, "shape": data.shape}
            np.lib.format.write_array_header_1_0(handle, header)
            for start in range(0, len(permutation), _WRITE_BLOCK_ROWS):
                block = data[permutation[start : start + _WRITE_BLOCK_ROWS]]
                block = transform(block) if transform else block
                handle.write(np.ascontiguousarray(block).tobytes())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


_held = threading.local()  # folders whose writer lock this thread holds (``exclusive``)


@contextlib.contextmanager
def exclusive(folder: Path, wait_s: float):
    """The host's writer lock of ``folder``, waiting up to ``wait_s`` while another process
    holds it (loading and writing a base); yields whether it was taken. A cold process loads
    inside it, so the processes of a host that all start cold write the matrix once: the first
    loads and writes, the others find its file when the lock is theirs."""
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    with open(folder / ".lock", "a+") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(_LOCK_POLL_S)  # flock has no timeout of its own
        held = _held.__dict__.setdefault("folders", set())
        held.add(folder)
        try:
            yield True
        finally:
            held.discard(folder)
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _writer_lock(folder: Path):
    if folder in _held.__dict__.get("folders", ()):  # taken by this thread in ``exclusive``
        yield True
        return
    with open(folder / ".lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_older(folder: Path, keep: str) -> None:
    """Delete what ``keep`` (``<stamp key>-v<version>``) supersedes: bases of another stamp
    (the knowledge base's model or row changed) or of an older version, and temporary files
    writers left behind (the caller holds the writer lock, so none is being written). A newer
    base, written by a process that saw a later version first, stays."""
    key, version = _parse(keep)
    for path in folder.iterdir():
        name = path.name
        if name == ".lock" or name.startswith(f"{keep}."):
            continue
        if name.startswith("."):
            if name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            continue
        other_key, other_version = _parse(name.split(".", 1)[0])
        if other_key == key and other_version is not None and other_version > version:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _parse(stem: str) -> tuple[str, int | None]:
    """(stamp key, version) of a base's file stem; version None if it is not one."""
    key, _, version = stem.rpartition("-v")
    return (key, int(version)) if version.isdigit() else (stem, None)


def forget(tenant_id: int, knowledge_base_id: int, epoch: int) -> None:
    """Remove a deleted knowledge base's files (processes that map them keep their pages)."""
    shutil.rmtree(directory(tenant_id, knowledge_base_id, epoch), ignore_errors=True)


def host_bytes() -> int:
    """Bytes of every vector file on this host, the rows and their codes (what the page cache
    holds once for all processes)."""
    root = Path(settings.VECTOR_HOST_DIR)
    if not root.is_dir():
        return 0
    return sum(p.stat().st_size for pattern in VECTOR_FILES for p in root.rglob(pattern))


VECTOR_FILES = ("*.vec.npy", "*.codes.npy")  # the rows' own files (not ids, lists or orders)
