"""The one place that names container images and the versions they pin.

Every image string used by the pipeline, the Dockerfile check and the tests comes from
here, so a TensorFlow upgrade is a one-line change (plus the pyproject bound).
"""

from __future__ import annotations

from components import project

#: TensorFlow version of the trainer: the pip pin, the base image and the serving
#: container must agree, or a SavedModel may use ops the server does not know.
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


#: Vertex AI prebuilt TensorFlow serving container for the pinned minor version, named as
#: Vertex names them (us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.MAJOR-MINOR). Where
#: Vertex has not published one for this minor, set `vertex.serving_image` to the
#: newest it has; the SavedModel's serving signatures use only core TensorFlow ops.
SERVING_IMAGE = ("us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu."
                 + "-".join(TENSORFLOW_VERSION.split(".")[:2]) + ":latest")

