"""The one place that names container images and the versions they pin.

Every image string used by the pipeline, the Dockerfile check and the tests comes from
here, so a TensorFlow upgrade is a one-line change (plus the pyproject bound).
"""

from __future__ import annotations

from components import project

#: TensorFlow version of the trainer: the pip pin and the base image must agree. The
#: registered model is served by the same image (trainer/serving.py), so the server runs
#: the TensorFlow the model was trained with; Vertex AI's prebuilt TensorFlow prediction
#: containers stop at 2.15 (Vertex AI docs: "Prebuilt containers for prediction").
TENSORFLOW_VERSION = "2.21.0"

#: GPU base image of the trainer container (CUDA and cuDNN matching TENSORFLOW_VERSION).
TRAINER_BASE_IMAGE = f"tensorflow/tensorflow:{TENSORFLOW_VERSION}-gpu"

#: Default Artifact Registry repository for the project's image; users set their own
#: (config `vertex.image_repository`), the committed spec keeps this visible placeholder.
DEFAULT_IMAGE_REPOSITORY = "us-central1-docker.pkg.dev/PROJECT_ID/gpu-pipeline"

#: Name of the image holding the project (pipeline components and trainer).
IMAGE_NAME = project.NAME


def image_uri(repository: str, tag: str) -> str:
    """Returns the URI of the project image in `repository` with `tag`.

    Args:
        repository: Registry path such as `us-central1-docker.pkg.dev/my-proj/repo`.
        tag: Image tag (a release or a content digest tag).

    Returns:
        The full image URI.
    """
    return f"{repository.rstrip('/')}/{IMAGE_NAME}:{tag}"


def pipeline_image(repository: str = DEFAULT_IMAGE_REPOSITORY) -> str:
    """Returns the image the pipeline's lightweight components run in (tagged with the
    project's release)."""
    return image_uri(repository, project.version())
