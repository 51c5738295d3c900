"""A knowledge base's vector matrix as files under ``VECTOR_HOST_DIR``, memory-mapped by every
process of the host. A **base** is the matrix at one version: ``.npy`` files and a ``.json``
header written last, each renamed into place once flushed; paths are made of integers, never of
input. An IVF base stores its rows list by list as float16, with the int8 codes of those rows.
A base in another layout or not matching its header is ignored and written anew: bases are
caches of the database. Older bases are unlinked (a mapped file stays valid)."""

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
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from retrieval.core.stamps import Stamps
from retrieval.vector.ivf import Ivf, quantize
from retrieval.vector.ivf import build as build_ivf
from retrieval.vector.scan import Part, VectorMatrix

logger = logging.getLogger(__name__)

REBASE_FRACTION = 0.1  # private and dead rows past this share of the base: rewrite it
WRITER_WAIT_S = 120.0  # how long a cold process waits for another one writing its base
IVF_LAYOUT = {"row_type": "float16", "codes": "int8"}

_LOCK_POLL_S = 0.05
_WRITE_BLOCK_ROWS = 65_536


def enabled() -> bool:
    return bool(settings.VECTOR_HOST_FILES)


def directory(tenant_id: int, knowledge_base_id: int, epoch: int) -> Path:
    root = Path(settings.VECTOR_HOST_DIR)
    return root / str(int(tenant_id)) / f"{int(knowledge_base_id)}-{int(epoch)}"


def stamp_key(stamp: tuple) -> str:
    return hashlib.sha256(repr(tuple(str(part) for part in stamp)).encode()).hexdigest()[:16]


def newest(folder: Path, stamp: tuple, dimensions: int) -> VectorMatrix | None:
    """The newest valid base of this stamp in ``folder``, mapped as a matrix of one shared part."""
    candidates = []
    for meta in folder.glob(f"{stamp_key(stamp)}-v*.json") if folder.is_dir() else ():
        with contextlib.suppress(ValueError):
            candidates.append((int(meta.stem.rsplit("-v", 1)[1]), meta))
    for version, meta in sorted(candidates, reverse=True):
        base = _open(meta, version, stamp, dimensions)
        if base is not None:
            return base
    return None


def _open(meta: Path, version: int, stamp: tuple, dimensions: int) -> VectorMatrix | None:
    stem = meta.with_suffix("")
    try:
        header = json.loads(meta.read_text())
        if header["version"] != version:
            raise ValueError("its header names another version")
        arrays = _arrays(stem, header, dimensions)
        index = None if header.get("ivf") is None else _ivf(header["ivf"], arrays)
        processed = Stamps.from_mapping(header.get("processed", {}))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        logger.warning("vector base %s ignored: %s", stem, exc)
        return None
    ids, documents, vectors, order = (arrays.get(key) for key in ("ids", "docs", "vec", "order"))
    part = Part(ids, vectors, documents, shared=True, order=order, ivf=index)
    return VectorMatrix((part,), version, stamp, processed, stem.name, version)


def _ivf(entry: dict, arrays: dict[str, np.ndarray]) -> Ivf:
    return Ivf(
        arrays["centroids"],
        arrays["offsets"],
        int(entry["probes"]),
        float(entry["recall"]),
        float(entry["build_s"]),
        float(entry["scan_share"]),
        arrays["codes"],
        arrays["scales"],
    )


def _arrays(stem: Path, header: dict, dimensions: int) -> dict[str, np.ndarray]:
    """A base's arrays by suffix, mapped as plain ndarray views (a memmap's slices cost a Python
    call each); ValueError if one does not match the header."""
    rows, entry = int(header["rows"]), header.get("ivf")
    expected = {"ids": (np.int64, (rows,)), "docs": (np.int64, (rows,))}
    expected["vec"] = (np.float32, (rows, dimensions))
    if entry is not None:
        if any(entry.get(key) != value for key, value in IVF_LAYOUT.items()):
            raise ValueError("its IVF is in an older layout")
        lists = int(entry["lists"])
        expected |= {
            "vec": (np.float16, (rows, dimensions)),
            "order": (np.int64, (rows,)),
            "centroids": (np.float32, (lists, dimensions)),
            "offsets": (np.int64, (lists + 1,)),
            "codes": (np.int8, (rows, dimensions)),
            "scales": (np.float32, (rows,)),
        }
    arrays = {}
    for suffix, (dtype, shape) in expected.items():
        array = np.load(f"{stem}.{suffix}.npy", mmap_mode="r", allow_pickle=False)
        if array.dtype != dtype or array.shape != shape:
            raise ValueError(f"its {suffix} does not match its header")
        arrays[suffix] = np.asarray(array)
    if entry is not None:
        offsets = arrays["offsets"]
        if not 1 <= int(entry["probes"]) <= lists or offsets[0] != 0 or offsets[-1] != rows:
            raise ValueError("its lists do not match its header")
        if np.any(np.diff(offsets) < 0) or not _orders(arrays["order"], arrays["ids"]):
            raise ValueError("its lists or order are out of order")
    return arrays


def _orders(order: np.ndarray, ids: np.ndarray) -> bool:
    """Whether ``order`` lists the rows by strictly ascending id (so it is a permutation)."""
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
) -> VectorMatrix | None:
    """Write a base of these rows (ids ascending, float32 unit vectors), map it back and delete
    older bases; None when another process is writing one for this knowledge base."""
    with exclusive(folder, wait_s=0) as locked:
        if not locked:
            return None
        stem = folder / f"{stamp_key(stamp)}-v{version}"
        header: dict[str, Any] = {
            "version": version,
            "rows": len(ids),
            "stamp": [str(part) for part in stamp],
            "processed": processed.to_mapping(),
        }
        permutation, rows_of = None, None
        if 0 < settings.VECTOR_IVF_MIN_ROWS <= len(ids):
            permutation, header["ivf"] = _write_ivf(stem, ids, vectors)
            rows_of = _half
        for suffix, array in (("ids", ids), ("docs", documents)):
            _write_atomically(Path(f"{stem}.{suffix}.npy"), array, permutation)
        _write_atomically(Path(f"{stem}.vec.npy"), vectors, permutation, rows_of)
        _write_atomically(stem.with_suffix(".json"), json.dumps(header).encode())
        base = _open(stem.with_suffix(".json"), version, stamp, int(vectors.shape[1]))
        if base is not None:
            _remove_older(folder, keep=stem.name)
        return base


def _write_ivf(stem: Path, ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, dict]:
    """Write the rows' IVF and codes; (the order to store the rows in, the header's entry)."""
    target = settings.VECTOR_IVF_TARGET_RECALL
    built = build_ivf(vectors, target)
    permutation, ivf = built.permutation, built.ivf
    _write_atomically(Path(f"{stem}.order.npy"), np.argsort(ids[permutation], kind="stable"))
    _write_atomically(Path(f"{stem}.centroids.npy"), ivf.centroids)
    _write_atomically(Path(f"{stem}.offsets.npy"), ivf.offsets)
    scales: list[np.ndarray] = []

    def codes_of(rows: np.ndarray) -> np.ndarray:
        codes, row_scales = quantize(_half(rows))  # the rows a search scores: float16
        scales.append(row_scales)
        return codes

    _write_atomically(Path(f"{stem}.codes.npy"), vectors, permutation, codes_of)
    _write_atomically(Path(f"{stem}.scales.npy"), np.concatenate(scales))
    entry = {
        "lists": ivf.lists,
        "probes": ivf.probes,
        "recall": round(ivf.recall, 4),
        "target_recall": target,
        "build_s": round(ivf.build_s, 2),
        "scan_share": round(ivf.scan_share, 4),
    }
    logger.info("vector base %s: IVF %s", stem.name, entry)
    return permutation, entry | IVF_LAYOUT


def _half(rows: np.ndarray) -> np.ndarray:
    return rows.astype(np.float16)


def _write_atomically(
    path: Path,
    data: np.ndarray | bytes,
    permutation: np.ndarray | None = None,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> None:
    """``data`` to ``path``, whole or not at all; with ``permutation``, its rows in that order a
    block at a time (no second copy), each block through ``transform`` when given."""
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


_held = threading.local()  # folders whose writer lock this thread holds


@contextlib.contextmanager
def exclusive(folder: Path, wait_s: float = WRITER_WAIT_S):
    """The host's writer lock of ``folder``, waiting up to ``wait_s``; yields whether it was
    taken (at once if this thread holds it)."""
    held = _held.__dict__.setdefault("folders", set())
    if folder in held:
        yield True
        return
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
        held.add(folder)
        try:
            yield True
        finally:
            held.discard(folder)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_older(folder: Path, keep: str) -> None:
    """Delete bases of another stamp or older than ``keep`` (``<stamp key>-v<version>``) and
    leftover temporary files; the caller holds the writer lock."""
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
    shutil.rmtree(directory(tenant_id, knowledge_base_id, epoch), ignore_errors=True)


VECTOR_FILES = ("*.vec.npy", "*.codes.npy")  # the rows' own files (not ids, lists or orders)


def host_bytes() -> int:
    root = Path(settings.VECTOR_HOST_DIR)
    if not root.is_dir():
        return 0
    return sum(p.stat().st_size for pattern in VECTOR_FILES for p in root.rglob(pattern))
