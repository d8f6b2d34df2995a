"""The trainer's models (tf-keras; see trainer.run.replica for why not Keras 3): a small
CNN, the pretrained backbones of `trainer.models.backbones` under a new head, or a user's
own model (`trainer.models.user_model`); compiled here, and re-compiled for fine-tuning."""

from __future__ import annotations

from typing import Any

from trainer.common.errors import InputError
from trainer.models.backbones import BACKBONES, MIN_IMAGE_SIZE, base_of, build_base, preprocess
from trainer.models.backbones import unfreeze_top as _unfreeze_top
from trainer.models.user_model import build_user_model, is_reference

#: The built-in models: `cnn`, then the backbones.
MODELS = ("cnn", *BACKBONES)


class ModelConfigError(InputError):
    """A model option the trainer cannot honour."""


#: The model's input: pixel values in [0, PIXEL_MAX]. The input pipeline hands it uint8
#: batches, which the model casts to float itself (Keras casts inputs to the Input's
#: dtype): the conversion runs on the accelerator, inside the training step, and a quarter
#: of the bytes cross to it (benchmarks/input_pipeline.py).
PIXEL_MAX = 255.0

#: Dropout before the new head's classifier, as in the Keras transfer-learning guide.
HEAD_DROPOUT = 0.2


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


def _backbone_body(keras: Any, name: str, inputs: Any, weights: str | None,
                   freeze_base: bool) -> Any:
    backbone = BACKBONES[name]
    size = int(inputs.shape[1])
    base = build_base(keras, backbone, size, weights)
    if freeze_base:
        base.trainable = False
    x = preprocess(keras, backbone, inputs)
    # training=False keeps a frozen base's batch norm in inference mode, in phase 1 and
    # after it is unfrozen for fine-tuning (the Keras transfer-learning guide).
    x = base(x, training=False if freeze_base else None)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.layers.Dropout(HEAD_DROPOUT, name="head_dropout")(x)


def build_model(keras: Any, name: str, image_size: int, num_classes: int,
                learning_rate: Any, *, weights: str | None = None, freeze_base: bool = False,
                jit_compile: bool = False, user_code: str = "",
                steps_per_execution: int = 1, evaluation_shards: int = 0) -> Any:
    """Builds and compiles a classifier of images with pixel values in [0, 255] (`PIXEL_MAX`:
    uint8 batches, or floats).

    Args:
        keras: The tf_keras module.
        name: `cnn` (the default), a backbone of `trainer.models.backbones.BACKBONES`, or a user's
            `package.module:function` (`trainer.models.user_model`).
        image_size: Input width and height.
        num_classes: Number of output classes.
        learning_rate: Adam learning rate, or a schedule (`trainer.models.learning_rate`).
        weights: A backbone's weights (`imagenet` or a local file without the top), or
            what a user's function gets as `weights`.
        freeze_base: For backbones, train only the new head (phase 1 of transfer learning).
        jit_compile: Compile the training step with XLA.
        user_code: Directory put first on the import path for a user's model.
        steps_per_execution: Training steps each call of the compiled step runs (Keras
            runs them in one `tf.function` call: fewer returns to Python per step).
        evaluation_shards: ParameterServerStrategy's exact evaluation shards (0: none;
            `compile_model`).

    Returns:
        The compiled tf_keras model, with the input `image` and the output
        `probabilities`. Under a mixed-precision policy the output stays float32, so the
        softmax and the loss are computed in full precision.

    Raises:
        ModelConfigError: Unknown model, or options it does not take.
        trainer.models.backbones.WeightsError: Weights that cannot be fetched or loaded.
        trainer.models.user_model.UserModelError: A user model that breaks the contract.
    """
    user = is_reference(name)
    if name not in MODELS and not user:
        raise ModelConfigError(f"--model is {name!r}; valid models are {', '.join(MODELS)}, "
                               "or package.module:function for your own")
    if name == "cnn" and (weights or freeze_base):
        raise ModelConfigError("--weights and --freeze-base apply to the pretrained backbones "
                               f"({', '.join(BACKBONES)}), not to cnn")
    if name in BACKBONES and image_size < MIN_IMAGE_SIZE:
        raise ModelConfigError(f"{name} needs images of at least {MIN_IMAGE_SIZE}x"
                               f"{MIN_IMAGE_SIZE}; the dataset has {image_size}x{image_size}")
    inputs = keras.Input(shape=(image_size, image_size, 3), name="image")
    if user:
        own = build_user_model(keras, name, image_size=image_size, num_classes=num_classes,
                               weights=weights or "", user_code=user_code)
        # The user's probabilities, as float32 under mixed precision, named as ours are.
        outputs = keras.layers.Activation("linear", dtype="float32",
                                          name="probabilities")(own(inputs))
        model = keras.Model(inputs, outputs, name="user_model")
    else:
        features = (_cnn_body(keras, inputs) if name == "cnn" else
                    _backbone_body(keras, name, inputs, weights, freeze_base))
        outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32",
                                     name="probabilities")(features)
        model = keras.Model(inputs, outputs, name=name)
    compile_model(keras, model, learning_rate, jit_compile=jit_compile,
                  steps_per_execution=steps_per_execution, evaluation_shards=evaluation_shards)
    return model


def compile_model(keras: Any, model: Any, learning_rate: Any, *, jit_compile: bool,
                  steps_per_execution: int = 1, evaluation_shards: int = 0) -> None:
    """(Re-)compiles with Adam at `learning_rate` (a number or a schedule); besides the
    accuracy, `examples` counts the images each epoch's metrics were computed on (summed
    over the replicas; `trainer.run.callbacks.EpochLog` reports the validation split's).

    `evaluation_shards` turns on ParameterServerStrategy's exact evaluation: the
    validation split cut into that many shards, each evaluated by one worker exactly once,
    so every image counts once, the last batch partial (tf_keras `Model.compile`,
    `pss_evaluation_shards`; other strategies ignore it).
    """
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy",
                  metrics=["accuracy", examples_metric(keras)],
                  jit_compile=jit_compile, steps_per_execution=steps_per_execution,
                  pss_evaluation_shards=evaluation_shards)


def examples_metric(keras: Any) -> Any:
    """A metric that counts the examples of the batches it sees (a Sum of ones)."""
    import tensorflow as tf

    class Examples(keras.metrics.Sum):
        def update_state(self, y_true, y_pred, sample_weight=None):
            return super().update_state(tf.ones_like(tf.reshape(y_true, [-1]), self.dtype))

    return Examples(name="examples")


def unfreeze_for_fine_tuning(keras: Any, model: Any, fraction: float, learning_rate: Any, *,
                             jit_compile: bool, steps_per_execution: int = 1,
                             evaluation_shards: int = 0) -> int:
    """Phase 2: unfreezes the top `fraction` of the backbone and re-compiles at the
    fine-tuning learning rate; the optimizer's step count carries on from phase 1 (the
    sidecar evaluator and TensorBoard count epochs from it). Call it inside the
    strategy's scope.

    Returns:
        The backbone's layers with weights that phase 2 trains.
    """
    steps_done = int(model.optimizer.iterations.numpy())
    unfrozen = _unfreeze_top(keras, base_of(keras, model), fraction)
    compile_model(keras, model, learning_rate, jit_compile=jit_compile,
                  steps_per_execution=steps_per_execution, evaluation_shards=evaluation_shards)
    model.optimizer.iterations.assign(steps_done)
    return unfrozen


def model_for(keras: Any, setup: Any, *, pretrained: bool = True,
              steps_per_execution: int | None = None) -> Any:
    """The compiled model of a replica's setup for its first phase; call it inside the
    strategy's scope.

    Args:
        keras: The tf_keras module.
        setup: The replica's setup (`trainer.run.replica_setup.ReplicaSetup`, of the layer
            above this one).
        pretrained: Load a backbone's `training.weights` (False where checkpoints replace
            them at once: the sidecar evaluator).
        steps_per_execution: Steps per call of the compiled step; None:
            `training.steps_per_execution` (the sidecar evaluator's `evaluate` over a
            dataset of unknown size takes 1).
    """
    from trainer.models.learning_rate import learning_rate
    from trainer.models.weights import local_weights

    opts = setup.options
    wanted = opts.weights if pretrained or is_reference(opts.model) else ""
    with local_weights(wanted) as weights:
        return build_model(keras, opts.model, setup.image_size, len(setup.classes),
                           learning_rate(setup.phases[0]), weights=weights,
                           freeze_base=setup.freeze_base, jit_compile=setup.xla,
                           user_code=opts.user_code,
                           steps_per_execution=opts.steps_per_execution
                           if steps_per_execution is None else steps_per_execution,
                           evaluation_shards=setup.evaluation_shards)
