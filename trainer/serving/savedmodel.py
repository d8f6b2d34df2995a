"""SavedModel export with serving signatures, committed by the chief only
(`trainer.common.committed_dirs`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from trainer.common.committed_dirs import commit_directory
from trainer.models.factory import PIXEL_MAX
from trainer.serving import measure
from trainer.serving.container import METADATA_FILE, SIGNATURE_BYTES, SIGNATURE_IMAGES


def _serving_module(tf: Any, model: Any, image_size: int, class_names: Sequence[str]) -> Any:
    names = tf.constant(list(class_names))

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            # The model's variables and resources (a user's model may hold a lookup
            # table), not the Keras model: tracking the model makes tf.saved_model.save
            # serialize every layer's call functions as Keras objects (MobileNetV3Small:
            # 7.4 CPU-s to save, 2.5 to load, against 1.4 and 0.5 without them), and only
            # the signatures are ever loaded (`measure`, the model server, TensorFlow
            # Serving). The optimizer's slots stay out.
            self.weights = list(model.variables)
            self.resources = [
                t for t in tf.train.TrackableView(model).descendants()
                if isinstance(t, (tf.saved_model.experimental.TrackableResource,
                                  tf.saved_model.Asset))]

        def _predict(self, images):
            probabilities = model(images, training=False)
            index = tf.argmax(probabilities, axis=-1)
            return {"probabilities": probabilities, "class_index": index,
                    "class_name": tf.gather(names, index)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve_bytes(self, image_bytes):
            def decode(data):
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                image = tf.image.resize(image, [image_size, image_size])
                return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)

            # uint8 pixels, as training reads them; the model casts them.
            return self._predict(tf.map_fn(decode, image_bytes, fn_output_signature=tf.uint8))

        @tf.function(input_signature=[
            tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name="images")])
        def serve_images(self, images):
            return self._predict(images * PIXEL_MAX)  # clients send [0, 1]

    return Serving()


def save_model(tf: Any, model: Any, destination: str, *, is_chief: bool, image_size: int,
               class_names: Sequence[str], extra_metadata: dict | None = None,
               evaluate: Callable[[str], dict] | None = None) -> str | None:
    """Saves the SavedModel; only the chief's copy is kept.

    Every worker saves (saving can run collective ops that need all of them), the
    non-chief ones to a unique temporary directory that is deleted afterwards. The chief
    commits its copy under `destination` (`trainer.common.committed_dirs`): readers find a complete
    SavedModel through the marker, or none; no directory is ever renamed, which Cloud
    Storage FUSE would refuse.

    Args:
        tf: The tensorflow module.
        model: The trained tf_keras model.
        destination: Where the model is committed (a local or /gcs/ path).
        is_chief: Whether this process is the chief.
        image_size: Input height and width of the model.
        class_names: Class names, in label order.
        extra_metadata: More fields for the model's metadata file.
        evaluate: On the chief, called with the saved (not yet committed) SavedModel's
            directory; what it returns is committed with the model (`trainer.serving.measure`).

    Returns:
        The committed SavedModel directory on the chief, None on other workers.
    """
    module = _serving_module(tf, model, image_size, class_names)
    signatures = {SIGNATURE_BYTES: module.serve_bytes, SIGNATURE_IMAGES: module.serve_images}
    if not is_chief:
        temp = tempfile.mkdtemp(prefix="workertemp_")
        try:
            tf.saved_model.save(module, temp, signatures=signatures)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        return None

    with commit_directory(destination, written_by="trainer") as staging:
        tf.saved_model.save(module, staging, signatures=signatures)
        metadata = {"class_names": list(class_names), "image_size": image_size,
                    "signatures": {SIGNATURE_BYTES: "encoded JPEG/PNG bytes",
                                   SIGNATURE_IMAGES: "float32 [batch, height, width, 3] in [0, 1]"},
                    "tensorflow_version": tf.__version__, **(extra_metadata or {})}
        with open(os.path.join(staging, METADATA_FILE), "w") as f:
            json.dump(metadata, f, indent=2)
        if evaluate is not None:
            measure.write(staging, evaluate(staging))
    return staging
