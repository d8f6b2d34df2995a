"""The pretrained backbones: `keras.applications` models (tf-keras) under a new head.

Each backbone takes the trainer's input as it is, pixel values in [0, 255], and applies
its own preprocessing inside the model, so the exported model serves raw pixels whatever
the backbone: ResNet50 its "caffe" preprocessing (BGR, ImageNet means removed) as a
layer in front of it; the others their built-in preprocessing layers
(`include_preprocessing=True`, their default), which expect [0, 255] as given.

ImageNet weights (`weights="imagenet"`) are fetched by Keras itself
(`keras.utils.get_file`, into the machine's Keras cache), which checks each file against
the hash published with it; a weights file is loaded by path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterator
from typing import Any

from trainer.common.errors import InputError, first_line

#: The `training.weights` value that asks Keras for its published ImageNet weights.
IMAGENET = "imagenet"

#: Smallest input every backbone accepts (their five stride-2 stages).
MIN_IMAGE_SIZE = 32

#: How long a stalled download may wait for data before the fetch fails (not a hang).
FETCH_TIMEOUT_SECONDS = 120


class WeightsError(InputError):
    """Pretrained weights that cannot be fetched or do not fit the backbone."""


@dataclasses.dataclass(frozen=True)
class Backbone:
    """A `keras.applications` model used without its top.

    Attributes:
        name: Its `training.model` value.
        constructor: Its function in `keras.applications`.
        trained_size: The image size its ImageNet weights were trained at.
        base_parameters: Parameters without the top (the same at every image size).
        caffe_preprocessing: Whether the trainer adds ResNet's "caffe" preprocessing in
            front (the others preprocess inside themselves).
    """

    name: str
    constructor: str
    trained_size: int
    base_parameters: int
    caffe_preprocessing: bool = False


#: The backbones, by `training.model` value (parameters counted by
#: tests/trainer/models/test_models.py).
BACKBONES = {b.name: b for b in (
    Backbone("resnet50", "ResNet50", 224, 23_587_712, caffe_preprocessing=True),
    Backbone("efficientnet_v2_b0", "EfficientNetV2B0", 224, 5_919_312),
    Backbone("efficientnet_v2_s", "EfficientNetV2S", 384, 20_331_360),
    Backbone("mobilenet_v3_small", "MobileNetV3Small", 224, 939_120),
    Backbone("mobilenet_v3_large", "MobileNetV3Large", 224, 2_996_352),
    Backbone("convnext_tiny", "ConvNeXtTiny", 224, 27_820_128),
)}


@contextlib.contextmanager
def _fetch_timeout() -> Iterator[None]:
    # Keras downloads with urllib and no timeout: a network that drops packets would hang
    # every replica. A socket timeout makes a stalled download fail instead.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(FETCH_TIMEOUT_SECONDS)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def preprocess(keras: Any, backbone: Backbone, inputs: Any) -> Any:
    """What comes before the base: ResNet's caffe preprocessing, else the pixels as given."""
    if backbone.caffe_preprocessing:
        return keras.layers.Lambda(keras.applications.resnet50.preprocess_input,
                                   name="caffe")(inputs)
    return inputs


def build_base(keras: Any, backbone: Backbone, image_size: int, weights: str | None) -> Any:
    """The backbone without its top, for images of `image_size` squared.

    Args:
        keras: The tf_keras module.
        backbone: Which one.
        image_size: Input width and height (at least `MIN_IMAGE_SIZE`).
        weights: None (random), `IMAGENET` (fetched by Keras) or a local weights file
            of this backbone without its top (`base.save_weights`, or Keras's own
            `*_notop.h5` file mirrored to Cloud Storage).

    Raises:
        WeightsError: The ImageNet weights cannot be fetched, or the file does not fit.
    """
    constructor = getattr(keras.applications, backbone.constructor)
    shape = (image_size, image_size, 3)
    if weights is None:
        return constructor(include_top=False, weights=None, input_shape=shape)
    if weights == IMAGENET:
        try:
            with _fetch_timeout():
                return constructor(include_top=False, weights=IMAGENET, input_shape=shape)
        except Exception as exc:  # noqa: BLE001 - Keras raises bare Exceptions for fetches
            raise WeightsError(
                f"training.weights is 'imagenet', but Keras could not fetch the ImageNet "
                f"weights of {backbone.name} ({first_line(exc)}); the machine that trains "
                "must reach storage.googleapis.com, or copy Keras's "
                f"{backbone.constructor} weights file (include_top=False) to Cloud Storage "
                "and give its gs:// path as training.weights") from None
    if not os.path.isfile(weights):
        raise WeightsError(f"training.weights {weights!r} does not exist; give a weights file "
                           "(local, gs:// or /gcs/), 'imagenet', or nothing")
    try:
        return constructor(include_top=False, weights=weights, input_shape=shape)
    except Exception as exc:  # noqa: BLE001 - h5py and Keras raise many kinds for a bad file
        raise WeightsError(
            f"training.weights {weights!r} cannot be loaded into {backbone.name} without its "
            f"top at {image_size}x{image_size} ({first_line(exc)}); give a weights file of "
            f"that architecture (include_top=False), 'imagenet', or nothing") from None


def base_of(keras: Any, model: Any) -> Any:
    """The backbone inside a model the trainer built (its only nested model)."""
    nested = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    if len(nested) != 1:
        raise ValueError(f"model {model.name} has no single backbone")
    return nested[0]


def unfreeze_top(keras: Any, base: Any, fraction: float) -> int:
    """Makes the top `fraction` of the base's layers trainable for fine-tuning; batch
    normalization stays frozen (and, as the base is called with training=False, in
    inference mode), as the Keras transfer-learning guide advises.

    Returns:
        The layers with weights that phase 2 trains.
    """
    base.trainable = True
    first = len(base.layers) - max(1, round(fraction * len(base.layers)))
    unfrozen = 0
    for index, layer in enumerate(base.layers):
        layer.trainable = index >= first and not isinstance(
            layer, keras.layers.BatchNormalization)
        unfrozen += bool(layer.trainable and layer.weights)
    return unfrozen
