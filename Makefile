# The two commands of the README: `make run` and `make test`. Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test reliability install browsers ocr-libs lint services-start services-stop services-status clean

## A fresh install takes about 2.7 GB (PyTorch's CPU build alone 0.75 GB): too little disk is
## said up front, so a failed pip run ("No space left on device") is not a mystery. The numba
## loops are then compiled into numba's cache, so a process's first search only loads them.
$(STAMP): requirements.txt requirements-local.txt requirements-dev.txt
	@free_kb=$$(df -Pk . | awk 'NR==2 {print $$4}'); \
	if [ -n "$$free_kb" ] && [ "$$free_kb" -lt 3500000 ]; then \
		echo "warning: $$((free_kb / 1024)) MB free here; a fresh install needs about 3.5 GB" >&2; \
	fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m retrieval.precompile
	touch $(STAMP)

install: $(STAMP)

## OpenCV, inside the OCR engine (requirements.txt), loads libGL and libglib: installed with apt
## when missing (needs root). Without them all works but OCR: scans fail saying what is missing.
ocr-libs:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libGL.so.1'; then \
		(apt-get update && apt-get install -y libgl1 libglib2.0-0) || \
		echo "libGL could not be installed: scanned PDFs and images will fail until it is"; \
	fi

## Serve http://127.0.0.1:8000 with a Celery worker, embedded services and the demo data.
run: install ocr-libs
	$(PY) manage.py run

## Debian's Chromium (and a CJK font for readable screenshots) for the admin's browser tests:
## Playwright drives it and downloads nothing. Needs root (apt); skipped when already there.
browsers:
	@if [ ! -x /usr/bin/chromium ] || ! fc-list :lang=zh 2>/dev/null | grep -q .; then \
		apt-get update && apt-get install -y chromium fonts-wqy-microhei; \
	fi

## The whole suite against the real (embedded) PostgreSQL and Redis. Embedded services that
## the suite started are stopped afterwards; ones already running (make run) are left alone.
test: install browsers ocr-libs
	$(PY) -m ruff check .
	@if $(PY) -m rag_project.embedded check; then keep=1; else keep=; fi; \
	$(PY) -m pytest -n 2 --dist loadgroup -m "not reliability" $(PYTEST_ARGS); rc=$$?; \
	if [ -z "$$keep" ]; then $(PY) -m rag_project.embedded stop > /dev/null; fi; \
	exit $$rc

## Fault and load suites (docs/RELIABILITY.md): each fault test starts and stops its own
## PostgreSQL, Redis, gunicorn and workers under /tmp; the worker-kill and BM25 tamper and
## invalidation tests run against the shared embedded services. Ends with a table.
## RAG_LOAD_SECONDS (default 60) sets the length of the load test.
RELIABILITY_TESTS := tests/reliability/faults tests/reliability/test_load.py \
	tests/knowledge/test_ingestion_worker.py tests/retrieval/test_bm25_invalidation.py \
	tests/retrieval/test_bm25_store.py
RELIABILITY_K := not test_bm25_store or tampered or exploit or redis_is_down or another_kb
reliability: install
	@if $(PY) -m rag_project.embedded check; then keep=1; else keep=; fi; \
	PYTHONPATH=$(CURDIR) RAG_LOAD_SECONDS=$${RAG_LOAD_SECONDS:-60} \
		$(PY) -m pytest -p tests.reliability.report \
		-k "$(RELIABILITY_K)" $(RELIABILITY_TESTS) $(PYTEST_ARGS); rc=$$?; \
	if [ -z "$$keep" ]; then $(PY) -m rag_project.embedded stop > /dev/null; fi; \
	exit $$rc

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

services-start: install
	$(PY) -m rag_project.embedded start

services-stop: install
	$(PY) -m rag_project.embedded stop

services-status: install
	$(PY) -m rag_project.embedded status

clean: services-stop
	rm -rf var
