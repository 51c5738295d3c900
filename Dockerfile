# Image for docker-compose.yml's web, worker and beat services.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# OpenCV (used by the OCR engine) loads libGL and libglib, which the slim image lacks.
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# The numba loops compiled into numba's cache beside the code, so a worker's first search only
# loads them.
RUN python -m retrieval.precompile
RUN useradd --create-home rag && mkdir -p /data && chown rag /data
USER rag
EXPOSE 8000
CMD ["gunicorn", "-c", "python:rag_project.gunicorn_config", "rag_project.wsgi:application", "--bind", "0.0.0.0:8000"]
