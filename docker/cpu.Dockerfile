# syntax=docker/dockerfile:1
# The CPU image (components/images.py names it): the pipeline's components, CPU-only worker
# pools, the model server and the Dataflow workers of the Beam dataset engine. One
# Dockerfile per image (see gpu.Dockerfile): every stage here is one this image needs. It
# installs its lock file (requirements/cpu.lock, every package pinned with its hashes,
# `make lock`) and nothing else; `make image-check` builds the same environment from the
# same lock and checks what this file promises.

# Debian's slim Python, by digest; Cloud Build passes components/images.py's value, or
# vertex.python_base_image (a mirror in Artifact Registry) inside a perimeter.
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# Beam's SDK image at the CPU lock's Beam version, for its boot program only (or
# vertex.beam_sdk_image inside a perimeter).
ARG BEAM_SDK=apache/beam_python3.11_sdk:2.77.0

FROM ${BEAM_SDK} AS beam_sdk

FROM ${PYTHON_BASE}
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TF_USE_LEGACY_KERAS=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The lock from PyPI, or from PIP_INDEX (vertex.pip_index_url) inside a perimeter
# (components/build/pip_index.py: an Artifact Registry index is read as the build's account).
ARG PIP_INDEX=""
COPY requirements/cpu.lock requirements/
COPY components/build/pip_index.py /tmp/pip_index.py
RUN python /tmp/pip_index.py install requirements/cpu.lock --index "$PIP_INDEX" \
    && rm /tmp/pip_index.py
# matplotlib builds its font list on first use (about a second); the reports' steps run
# in fresh containers, so it is built here once.
RUN python -c "import matplotlib.font_manager"
# Dataflow starts the workers' container with its entry point, which must run Beam's boot
# program (Dataflow docs, "Build custom container images"); the boot program starts the
# SDK worker with the Beam installed from the lock. Everything else that runs this image
# names its command: the pipeline's components (KFP), CustomJob pools and the model server.
COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam
# The project's files after the dependencies (see gpu.Dockerfile).
COPY . ./
RUN pip install --no-deps --no-build-isolation -e .
ENTRYPOINT ["/opt/apache/beam/boot"]
