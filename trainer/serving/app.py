"""Online prediction: the exported SavedModel behind Vertex AI's custom-container contract.

The registered model is served by the project's CPU image (the TensorFlow it was trained
with; Vertex AI's prebuilt TensorFlow prediction containers stop at 2.15), run with
aiplatform's own prediction framework: the CPR model server
(`python -m google.cloud.aiplatform.prediction.model_server`) with its default
`PredictionHandler` and the `SavedModelPredictor` below (the container spec that says so:
`trainer.serving.app.container`). Vertex AI sets
`AIP_HTTP_PORT`, `AIP_PREDICT_ROUTE`, `AIP_HEALTH_ROUTE` and `AIP_STORAGE_URI` (where it
copied the model) for a custom container (Vertex AI docs: "Custom container requirements
for prediction").

Requests are `{"instances": [...]}` where every instance is an encoded image,
`{"b64": "<base64 JPEG/PNG>"}`, or a float image, `[[[r, g, b], ...], ...]` in [0, 1] of
the model's input size; responses are `{"predictions": [{"class_name": ..., "class_index":
..., "probabilities": [...]}, ...]}`. A malformed instance is a 400 naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from typing import Any

from google.cloud.aiplatform.prediction.predictor import Predictor

from trainer.serving.container import FORMATS


def _bad_request(message: str) -> Exception:
    from fastapi import HTTPException

    return HTTPException(status_code=400, detail=message)


def _fetch(artifacts_uri: str) -> str:
    """A local directory holding the model artifacts of `artifacts_uri`."""
    if not artifacts_uri.startswith("gs://"):
        return artifacts_uri
    from trainer.common.gcs import split_gcs_uri, storage_client

    bucket, prefix = split_gcs_uri(artifacts_uri.rstrip("/") + "/")
    local = tempfile.mkdtemp(prefix="model-")
    for blob in storage_client().list_blobs(bucket, prefix=prefix):
        relative = blob.name[len(prefix):]
        if relative and not relative.endswith("/"):
            target = os.path.join(local, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            blob.download_to_filename(target)
    return local


class SavedModelPredictor(Predictor):
    """Serves the SavedModel's `serving_default` (encoded images) and `serving_images`
    (float images) signatures."""

    def load(self, artifacts_uri: str, **kwargs: Any) -> None:
        """Loads the SavedModel Vertex AI copied to `artifacts_uri` (AIP_STORAGE_URI)."""
        import tensorflow as tf

        from trainer.serving.container import METADATA_FILE, SIGNATURE_BYTES, SIGNATURE_IMAGES

        local = _fetch(artifacts_uri)
        self._tf = tf
        self._model = tf.saved_model.load(local)
        self._by_kind = {"encoded": self._model.signatures[SIGNATURE_BYTES],
                         "float": self._model.signatures[SIGNATURE_IMAGES]}
        with open(os.path.join(local, METADATA_FILE)) as f:
            self._size = int(json.load(f)["image_size"])

    def _instance(self, index: int, instance: Any) -> tuple[str, Any]:
        if isinstance(instance, dict):
            encoded = instance.get("b64", instance.get("image_bytes", {}))
            encoded = encoded.get("b64") if isinstance(encoded, dict) else encoded
            if not isinstance(encoded, str):
                raise _bad_request(f"instances[{index}] is an object without \"b64\"; expected "
                                   "{\"b64\": \"<base64 JPEG/PNG>\"} or a float image")
            try:
                data = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise _bad_request(f"instances[{index}].b64 is not valid base64") from None
            try:
                self._tf.io.decode_image(data, channels=3, expand_animations=False)
            except self._tf.errors.InvalidArgumentError:
                raise _bad_request(f"instances[{index}] is not a {FORMATS} image"
                                   ) from None
            return "encoded", data
        try:
            image = self._tf.constant(instance, dtype=self._tf.float32)
        except (ValueError, TypeError):
            raise _bad_request(f"instances[{index}] is neither {{\"b64\": ...}} nor a "
                               "float image") from None
        if image.shape != (self._size, self._size, 3):
            raise _bad_request(f"instances[{index}] has shape {list(image.shape)}; float "
                               f"images are [{self._size}, {self._size}, 3] in [0, 1]")
        return "float", image

    def preprocess(self, prediction_input: Any) -> tuple[str, Any]:
        """Checks the request; returns (kind, batch) with every instance of one kind."""
        instances = prediction_input.get("instances") if isinstance(
            prediction_input, dict) else None
        if not isinstance(instances, list) or not instances:
            raise _bad_request("the request body must be {\"instances\": [...]} with at "
                               "least one instance")
        parsed = [self._instance(i, x) for i, x in enumerate(instances)]
        kinds = {kind for kind, _ in parsed}
        if len(kinds) > 1:
            raise _bad_request("instances mix encoded and float images; send one kind per "
                               "request")
        kind = kinds.pop()
        values = [value for _, value in parsed]
        batch = self._tf.constant(values) if kind == "encoded" else self._tf.stack(values)
        return kind, batch

    def predict(self, instances: tuple[str, Any]) -> dict[str, Any]:
        """Runs the signature of the batch's kind."""
        kind, batch = instances
        argument = "image_bytes" if kind == "encoded" else "images"
        return self._by_kind[kind](**{argument: batch})

    def answer(self, request: Any) -> dict[str, Any]:
        """The predict route's answer to a request body, without the server: what
        aiplatform's PredictionHandler returns (preprocess, predict, postprocess).
        Raises the same 400 HTTPException for a malformed request."""
        return self.postprocess(self.predict(self.preprocess(request)))

    def postprocess(self, prediction_results: dict[str, Any]) -> dict[str, Any]:
        """`{"predictions": [...]}`, one per instance, in order."""
        names = prediction_results["class_name"].numpy()
        indices = prediction_results["class_index"].numpy()
        probabilities = prediction_results["probabilities"].numpy()
        return {"predictions": [
            {"class_name": n.decode("utf-8"), "class_index": int(i),
             "probabilities": [round(float(p), 6) for p in ps]}
            for n, i, ps in zip(names, indices, probabilities, strict=True)]}
