"""Model definitions of the trainer (tf-keras; see trainer.task for why not Keras 3)."""

from __future__ import annotations

import os
from typing import Any

from trainer.errors import InputError

MODELS = ("cnn", "resnet50")


class ModelConfigError(InputError):
    """A model option the trainer cannot honour."""


#: The model's input: pixel values in [0, PIXEL_MAX]. The input pipeline hands it uint8
#: batches, which the model casts to float itself (Keras casts inputs to the Input's
#: dtype): the conversion runs on the accelerator, inside the training step, and a quarter
#: of the bytes cross to it (benchmarks/input_pipeline.py).
PIXEL_MAX = 255.0


def _cnn_body(keras: Any, inputs: Any) -> Any:
    layers = keras.layers
    x = layers.Rescaling(1.0 / PIXEL_MAX, name="scale")(inputs)  # to [0, 1]
    for filters in (32, 64, 64):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D()(x)
    # Flatten keeps where features are, which tells shapes apart; global pooling learned
    # far slower on the builtin data, and batch norm's statistics lag in short runs.
    x = layers.Flatten()(x)
    return layers.Dense(64, activation="relu")(x)


def _resnet50_body(keras: Any, inputs: Any, weights: str | None, freeze_base: bool) -> Any:
    # ResNet50 expects 0..255 BGR with ImageNet means removed ("caffe" preprocessing).
    x = keras.layers.Lambda(keras.applications.resnet50.preprocess_input, name="caffe")(inputs)
    # weights=None: nothing is downloaded; pretrained weights come from a file.
    base = keras.applications.ResNet50(include_top=False, weights=None,
                                       input_shape=tuple(inputs.shape[1:]))
    if weights:
        if not os.path.exists(weights):
            raise ModelConfigError(f"--weights {weights!r} does not exist; give a ResNet50 "
                                   "(include_top=False) weights file, or no --weights for "
                                   "random initialisation")
        base.load_weights(weights)
    if freeze_base:
        base.trainable = False
    # training=False keeps a frozen base's batch norm in inference mode (transfer learning).
    x = base(x, training=False if freeze_base else None)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.layers.Dense(256, activation="relu")(x)


def build_model(keras: Any, name: str, image_size: int, num_classes: int, learning_rate: float,
                *, weights: str | None = None, freeze_base: bool = False,
                jit_compile: bool = False) -> Any:
    """Builds and compiles a classifier of images with pixel values in [0, 255] (`PIXEL_MAX`:
    uint8 batches, or floats).

    Args:
        keras: The tf_keras module.
        name: `cnn` (small CNN, the default) or `resnet50` (keras.applications).
        image_size: Input width and height.
        num_classes: Number of output classes.
        learning_rate: Adam learning rate.
        weights: For resnet50, a weights file of the base (include_top=False).
        freeze_base: For resnet50, train only the new head (transfer learning).
        jit_compile: Compile the training step with XLA.

    Returns:
        The compiled tf_keras model. Under a mixed-precision policy the output layer stays
        float32, so the softmax and the loss are computed in full precision.

    Raises:
        ModelConfigError: Unknown model, or options it does not take.
    """
    if name not in MODELS:
        raise ModelConfigError(f"--model is {name!r}; valid models are {', '.join(MODELS)}")
    if name == "cnn" and (weights or freeze_base):
        raise ModelConfigError("--weights and --freeze-base apply to --model resnet50 only")
    if name == "resnet50" and image_size < 32:
        raise ModelConfigError(f"ResNet50 needs images of at least 32x32; the dataset has "
                               f"{image_size}x{image_size}")
    inputs = keras.Input(shape=(image_size, image_size, 3), name="image")
    features = (_cnn_body(keras, inputs) if name == "cnn"
                else _resnet50_body(keras, inputs, weights, freeze_base))
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32",
                                 name="probabilities")(features)
    model = keras.Model(inputs, outputs, name=name)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=jit_compile)
    return model


def model_for(keras: Any, plan: Any) -> Any:
    """The compiled model of a run plan (`trainer.plan.RunPlan`); call it inside the
    strategy's scope."""
    opts = plan.options
    return build_model(keras, opts.model, plan.image_size, len(plan.classes),
                       opts.learning_rate, weights=opts.weights or None,
                       freeze_base=opts.freeze_base, jit_compile=plan.xla)
