# syntax=docker/dockerfile:1
#
# Two images from one file:
#   docker build -t gradserve:0.1.0-cpu .                    (default: the last stage, `cpu`)
#   docker build --target gpu -t gradserve:0.1.0-gpu .       (CUDA 12 runtime + the [gpu] extra)
#
# The project is installed the README's way, minus -e (no requirements.txt):
#   install command: pip install .

FROM python:3.11.11-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY . .
RUN pip install .


FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04 AS gpu-builder
# Ubuntu package versions are not pinned: the archive drops superseded versions,
# so a pin breaks the build within weeks; the CUDA base tag is the pin that matters.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY . .
# DL3013 misreads ".[gpu]" as an unpinned index package: it is this project (a local
# path) with its gpu extra, installed like the unflagged `pip install .` above.
# hadolint ignore=DL3013
RUN pip install ".[gpu]"


FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04 AS gpu
# Same reason as in gpu-builder: unpinned Ubuntu packages, pinned CUDA base tag.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 gradserve \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gradserve
COPY --from=gpu-builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CUPY_CACHE_DIR=/tmp/cupy \
    GRADSERVE_DEVICE=cuda
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["gradserve", "serve", "--host", "0.0.0.0", "--port", "8000"]


FROM python:3.11.11-slim-bookworm AS cpu
RUN groupadd --system --gid 10001 gradserve \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gradserve
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["gradserve", "serve", "--host", "0.0.0.0", "--port", "8000"]
