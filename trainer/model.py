"""Model definitions of the trainer (tf-keras; see trainer.task for why not Keras 3)."""

from __future__ import annotations

from typing import Any


def preprocess(tf: Any, images: Any) -> Any:
    """Scales uint8 images to float32 in [0, 1]; shared by training and serving."""
    return tf.cast(images, tf.float32) / 255.0


def build_cnn(keras: Any, image_size: int, num_classes: int, learning_rate: float) -> Any:
    """A small CNN for image classification, compiled with Adam and cross-entropy.

    Args:
        keras: The tf_keras module.
        image_size: Input width and height.
        num_classes: Number of output classes.
        learning_rate: Adam learning rate.

    Returns:
        A compiled tf_keras model taking float32 images in [0, 1].
    """
    layers = keras.layers
    model = keras.Sequential([
        keras.Input(shape=(image_size, image_size, 3), name="image"),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        # Flatten keeps where features are, which tells shapes apart; global pooling
        # learned far slower here, and batch norm's statistics lag in short runs.
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        # float32 output: stays correct under a mixed-precision policy.
        layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities"),
    ], name="cnn")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
