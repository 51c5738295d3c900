"""``bench hostmem --chunks N --workers W``: how much memory W gunicorn workers take for one
knowledge base's vectors, with host files (``VECTOR_HOST_FILES``, the default) and without.

A throwaway knowledge base of N synthetic chunks (as ``bench load`` makes it) is searched over
HTTP by W gunicorn workers until every worker has loaded its matrix (each worker's
``/healthz``-free answer is not attributable, so the clients search until every worker process
maps the vector file, or for the same number of searches without host files). Then each
worker's ``/proc/<pid>/smaps`` is read: its RSS, PSS and shared memory (``shared_bytes``:
resident pages another process maps too) in all, and the RSS, PSS and shared memory of its
mappings of vector files (the rows, float16 in a base with an IVF, and then their int8 codes).
PSS divides each shared page among the processes mapping it, so the workers' summed PSS of the
vector files is what the host holds for them; the target is at most 1.2x one copy
(``one_copy_bytes``: the float32 matrix's size). The same is done with host files off, where
each worker holds a private copy (the vectors live in anonymous memory then: its RSS
growth is reported as ``private_matrix_bytes``). With host files the same key holds what the
first searches added besides the mapped files, none of it vectors (warming is off here, so
that includes numba's compiled loops, LLVM's memory).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import CommandError

from bench import corpus
from bench.load import _knowledge_base, gunicorn_process
from retrieval.vector import hostfile

SEARCHES_CEILING = 2000
# The rows and, with an IVF, their int8 codes (retrieval.vector.hostfile): both count as vectors.
_VECTOR_SUFFIXES = tuple(pattern.lstrip("*") for pattern in hostfile.VECTOR_FILES)
# smaps fields summed for the whole process and again for its vector file mappings.
_SMAPS_FIELDS = {"Rss": "rss", "Pss": "pss", "Shared_Clean": "shared", "Shared_Dirty": "shared"}


def add_hostmem_arguments(parser) -> None:
    parser.add_argument("--chunks", type=int, default=300_000, help="chunks in the knowledge base")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--seed", type=int, default=7)


def bench_hostmem(options: dict[str, Any]) -> dict[str, Any]:
    workers = options["workers"]
    if options["chunks"] < 20 or workers < 1:
        raise CommandError("--chunks >= 20 and --workers >= 1, please")
    result: dict[str, Any] = {"chunks": options["chunks"], "workers": workers}
    one_copy = options["chunks"] * corpus.DIMENSIONS * 4
    result["one_copy_bytes"] = one_copy
    with _knowledge_base(options["chunks"], options["seed"]) as (kb, key, queries):
        for label, files in (("host_files", "true"), ("private", "false")):
            env = {
                "VECTOR_HOST_FILES": files,
                "RAG_WARM_ON_START": "false",
                "SECRET_KEY": os.environ.get("BENCH_SECRET_KEY") or secrets.token_urlsafe(64),
            }
            with gunicorn_process(workers, env) as (base_url, master):
                pids = gunicorn_workers(master.pid, workers)
                before = {pid: _smaps(pid) for pid in pids}
                searches = _search_until(base_url, kb.pk, key, queries, pids, files == "true")
                after = {pid: _smaps(pid) for pid in pids}
            result[label] = _summary(before, after, searches, one_copy)
    shared = result["host_files"]["vector_pss_bytes"]
    result["host_files_ratio_to_one_copy"] = round(shared / one_copy, 3)
    return result


def gunicorn_workers(master: int, count: int) -> list[int]:
    deadline = time.monotonic() + 120
    while True:
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                children.append(int(stat.parent.name))
        if len(children) >= count:
            return children[:count]
        if time.monotonic() > deadline:
            raise CommandError(f"gunicorn started {len(children)} of {count} workers")
        time.sleep(0.1)


def _maps_vectors(pid: int) -> bool:
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return any(line.rstrip().endswith(".vec.npy") for line in maps)  # the float32 rows


def _search_until(base_url, kb_id, key, queries, pids, files: bool) -> int:
    """Search from 4 threads until every worker maps the vector file (host files) or for
    ``20 x workers`` searches (without; each worker then most likely served some)."""
    done = threading.Event()
    count = [0]
    lock = threading.Lock()
    target = 20 * len(pids)

    def client(i: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
            n = i
            while not done.is_set():
                response = http.post(
                    f"{base_url}/api/v1/knowledge-bases/{kb_id}/search",
                    json={"query": queries[n % len(queries)], "mode": "vector", "top_k": 5},
                )
                if response.status_code != 200:
                    raise CommandError(f"search failed: {response.status_code}")
                n += 4
                with lock:
                    count[0] += 1
                    total = count[0]
                if total >= SEARCHES_CEILING or (not files and total >= target):
                    done.set()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    while files and not done.is_set():
        if all(_maps_vectors(pid) for pid in pids) and count[0] >= target:
            done.set()
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    return count[0]


def _smaps(pid: int) -> dict[str, int]:
    """kB figures of the process, and of its mappings of vector files, in bytes."""
    totals = dict.fromkeys((*_SMAPS_FIELDS.values(), "anon"), 0)
    totals |= {f"vector_{name}": 0 for name in _SMAPS_FIELDS.values()}
    vector = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not fields:
            continue
        if not fields[0].endswith(":"):  # a mapping's header line: address range ... path
            vector = line.rstrip().endswith(_VECTOR_SUFFIXES)
            continue
        if len(fields) != 3 or fields[2] != "kB":  # VmFlags and the like
            continue
        name, value = fields[0][:-1], int(fields[1]) * 1024
        if name in _SMAPS_FIELDS:
            totals[_SMAPS_FIELDS[name]] += value
            if vector:
                totals[f"vector_{_SMAPS_FIELDS[name]}"] += value
        elif name == "Anonymous":
            totals["anon"] += value
    return totals


def _summary(before, after, searches: int, one_copy: int) -> dict[str, Any]:
    per_worker = [
        {
            "rss_bytes": after[pid]["rss"],
            "pss_bytes": after[pid]["pss"],
            "shared_bytes": after[pid]["shared"],
            "vector_rss_bytes": after[pid]["vector_rss"],
            "vector_pss_bytes": after[pid]["vector_pss"],
            "vector_shared_bytes": after[pid]["vector_shared"],
            "anonymous_growth_bytes": after[pid]["anon"] - before[pid]["anon"],
        }
        for pid in after
    ]
    return {
        "searches": searches,
        "per_worker": per_worker,
        "rss_bytes": sum(w["rss_bytes"] for w in per_worker),
        "pss_bytes": sum(w["pss_bytes"] for w in per_worker),
        "shared_bytes": sum(w["shared_bytes"] for w in per_worker),
        "vector_pss_bytes": sum(w["vector_pss_bytes"] for w in per_worker),
        "private_matrix_bytes": sum(max(0, w["anonymous_growth_bytes"]) for w in per_worker),
        "private_matrix_ratio_to_one_copy": round(
            sum(max(0, w["anonymous_growth_bytes"]) for w in per_worker) / one_copy, 3
        ),
    }


def hostmem_table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['chunks']:,} chunks, {r['workers']} gunicorn workers; one copy of the vectors: "
        f"{r['one_copy_bytes'] / 2**20:.0f} MiB"
    ]
    for label in ("host_files", "private"):
        s = r[label]
        lines.append(
            f"{label}: summed RSS {s['rss_bytes'] / 2**20:.0f} MiB, PSS "
            f"{s['pss_bytes'] / 2**20:.0f} MiB, shared {s['shared_bytes'] / 2**20:.0f} MiB; "
            f"vector files PSS "
            f"{s['vector_pss_bytes'] / 2**20:.0f} MiB; private growth "
            f"{s['private_matrix_bytes'] / 2**20:.0f} MiB ({s['searches']} searches)"
        )
    lines.append(f"host files / one copy: {r['host_files_ratio_to_one_copy']}")
    return "\n".join(lines)
