# The project image: the trainer (entry point, as in the multi-worker lab) and the
# pipeline's own components. The base's TensorFlow must match components/images.py
# (TENSORFLOW_VERSION) and the pyproject pin; tests check that they agree.
FROM tensorflow/tensorflow:2.21.0-gpu

WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TF_USE_LEGACY_KERAS=1 PIP_NO_CACHE_DIR=1

# Dependencies first, so that a source change does not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir -p pipelines components trainer \
 && touch pipelines/__init__.py components/__init__.py trainer/__init__.py \
 && pip install -e . \
 && rm -rf pipelines components trainer

COPY Dockerfile .dockerignore ./
COPY pipelines ./pipelines
COPY components ./components
COPY trainer ./trainer

# Editable install: the build stage finds the Dockerfile and sources beside the packages.
RUN pip install --no-deps -e .

ENTRYPOINT ["python", "-m", "trainer.task"]
