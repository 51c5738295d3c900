"""``bench ocr --pages N``: OCR character accuracy per language, and pages per minute.

N full A4 pages per language (``bench.scans``: 14 lines of 12 pt text from fixed Chinese and
English sentence pools, 200 dpi, Gaussian noise, each page turned by an angle between 0.5 and
1.5 degrees either way) are written by Pillow into one image-only PDF per language and read by
``parse_document`` as the worker reads an upload: pypdf finds no text layer, pdfium renders each
page at 200 dpi, the bundled engine (RapidOCR, PP-OCRv4) recognises it. Accuracy per page is
1 - (edit distance / reference length) on normalised text (``bench.scans.normalised``: NFKC,
whitespace runs as one space, none next to CJK characters); the mean and the worst page are
reported. Throughput is pages per minute of wall-clock time over the reading alone (the engine is
loaded first and timed on its own), on this machine's CPUs, whose count and load average are
reported with it: the figure is only as good as the machine was idle. CPU seconds per page (all
threads of this process) are reported too, as the figure that does not depend on other load.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from typing import Any

from django.core.management.base import CommandError

from bench.scans import DPI, character_accuracy, page_lines, render_scan, scanned_pdf


def add_ocr_arguments(parser) -> None:
    parser.add_argument("--pages", type=int, default=10, help="pages per language")
    parser.add_argument("--noise", type=float, default=12.0, help="noise, grey levels (s.d.)")
    parser.add_argument("--seed", type=int, default=1)


def bench_ocr(options: dict[str, Any]) -> dict[str, Any]:
    from knowledge.ingestion.parsers.ocr import rapidocr_engine
    from knowledge.ingestion.parsing import Ocr, parse_document

    pages = options["pages"]
    if pages < 1:
        raise CommandError("--pages must be at least 1")
    started = time.perf_counter()
    rapidocr_engine()
    load_s = time.perf_counter() - started
    load_before = os.getloadavg()[0]
    languages = {}
    total_s = 0.0
    for language in ("en", "zh"):
        turns = random.Random(f"{options['seed']}-{language}")  # noqa: S311
        texts, images = [], []
        for number in range(pages):
            seed = options["seed"] * 1000 + number
            lines = page_lines(language, seed)
            angle = turns.uniform(0.5, 1.5) * turns.choice((-1, 1))
            texts.append("\n".join(lines))
            images.append(render_scan(lines, seed=seed, angle=angle, noise=options["noise"]))
        data = scanned_pdf(images)
        started, cpu_started = time.perf_counter(), time.process_time()
        document = parse_document(f"{language}.pdf", data, ocr=Ocr())
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        total_s += seconds
        read = {section.page: section.text for section in document.sections}
        accuracy = [character_accuracy(text, read.get(n, "")) for n, text in enumerate(texts, 1)]
        languages[language] = {
            "pages": pages,
            "accuracy_mean": round(statistics.fmean(accuracy), 4),
            "accuracy_min": round(min(accuracy), 4),
            "seconds": round(seconds, 1),
            "pages_per_minute": round(60 * pages / seconds, 2),
            "cpu_seconds_per_page": round(cpu_seconds / pages, 2),
        }
    return {
        "dpi": DPI,
        "noise": options["noise"],
        "engine_load_s": round(load_s, 2),
        "languages": languages,
        "pages_per_minute": round(60 * 2 * pages / total_s, 2),
        "cpus": os.cpu_count(),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def ocr_table(r: dict[str, Any]) -> str:
    lines = [
        f"OCR of scanned A4 pages at {r['dpi']} dpi (noise {r['noise']}, turned 0.5-1.5 deg), "
        f"{r['cpus']} CPUs, load average {r['load_average_before']} -> "
        f"{r['load_average_after']}; engine loaded in {r['engine_load_s']} s\n",
        f"{'':10}{'pages':>7}{'accuracy':>11}{'worst page':>12}{'seconds':>10}{'pages/min':>11}"
        f"{'CPU s/page':>12}",
    ]
    for language, row in r["languages"].items():
        lines.append(
            f"{language:10}{row['pages']:>7}{row['accuracy_mean']:>11.2%}"
            f"{row['accuracy_min']:>12.2%}{row['seconds']:>10.1f}{row['pages_per_minute']:>11.2f}"
            f"{row['cpu_seconds_per_page']:>12.2f}"
        )
    lines.append(f"{'all':10}{'':>40}{r['pages_per_minute']:>11.2f}")
    return "\n".join(lines)
