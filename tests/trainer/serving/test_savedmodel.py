"""The SavedModel export (`trainer.serving.savedmodel`) of a user's own model, in this process."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def test_a_model_holding_a_lookup_table_exports_and_serves_as_it_predicts(tmp_path):
    """A user's model whose last layer maps classes through a lookup table (a resource, not
    a variable): its SavedModel serves what the model predicts, the table included (an
    export that tracked only the variables refused it: "untracked resource")."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("tf_keras")

    from trainer.serving.savedmodel import save_model

    class Reversed(keras.layers.Layer):
        """Class i becomes class 3 - i, through a table."""

        def __init__(self):
            super().__init__()
            self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant([0, 1, 2, 3], tf.int64), tf.constant([3, 2, 1, 0], tf.int64)), -1)

        def call(self, probabilities):
            return tf.one_hot(self.table.lookup(tf.argmax(probabilities, -1)), 4)

    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(x))
    model = keras.Model(inputs, Reversed()(keras.layers.Dense(4, activation="softmax")(x)))
    images = np.random.RandomState(0).rand(5, 8, 8, 3).astype("float32")

    saved = save_model(tf, model, str(tmp_path / "model"), is_chief=True, image_size=8,
                       class_names="abcd")
    served = tf.saved_model.load(saved).signatures["serving_images"](
        images=tf.constant(images))
    expected = np.argmax(model(images * 255, training=False).numpy(), axis=-1)
    assert served["class_index"].numpy().tolist() == expected.tolist()
