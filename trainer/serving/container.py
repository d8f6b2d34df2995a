"""How a registered model is served: its signatures and the Model Registry container spec.

The registered model runs in the project's CPU image with aiplatform's CPR model server and
the predictor in `trainer.serving.app`. Kept apart from that predictor (which imports aiplatform's
prediction framework, 1.6 s) so that building a pipeline does not pay for it.
"""

from __future__ import annotations

import base64
from typing import Any

#: The exported SavedModel's signatures: encoded JPEG/PNG bytes, and float32 images in
#: [0, 1]; both return `probabilities`, `class_index` and `class_name`.
SIGNATURE_BYTES = "serving_default"
SIGNATURE_IMAGES = "serving_images"
#: Beside the SavedModel: its class names, signatures and how it was trained.
METADATA_FILE = "gpu_pipeline_model.json"

#: How the registered model's container runs: the CPR model server with our predictor.
SERVER_MODULE = "google.cloud.aiplatform.prediction.model_server"
PREDICT_ROUTE = "/predict"
HEALTH_ROUTE = "/health"
ENVIRONMENT = {
    "HANDLER_MODULE": "google.cloud.aiplatform.prediction.handler",
    "HANDLER_CLASS": "PredictionHandler",
    "PREDICTOR_MODULE": "trainer.serving.app",
    "PREDICTOR_CLASS": "SavedModelPredictor",
    "TF_USE_LEGACY_KERAS": "1",
    # One server process per container: a SavedModel loaded once, TensorFlow's own
    # thread pools using every core.
    "VERTEX_CPR_WEB_CONCURRENCY": "1",
}


#: The image formats the predictor decodes (`tf.io.decode_image`: TensorFlow 2.21's
#: DecodeImage reads WebP too; tests/trainer/serving/test_app.py sends one), as every
#: message and help text names them.
FORMATS = "JPEG, PNG, GIF, BMP or WebP"


def encoded_instance(image: bytes) -> dict[str, str]:
    """An encoded image (one of `FORMATS`) as the predict route takes one instance
    (`trainer.serving.app`; the endpoint passes the body on unchanged)."""
    return {"b64": base64.b64encode(image).decode()}


def container_spec(image_uri: str) -> dict[str, Any]:
    """The Model Registry `containerSpec` that serves a model exported by this project.

    No port is given: Vertex AI then uses 8080 and passes it as AIP_HTTP_PORT.
    """
    return {"imageUri": image_uri, "command": ["python", "-m", SERVER_MODULE],
            "env": [{"name": k, "value": v} for k, v in ENVIRONMENT.items()],
            "predictRoute": PREDICT_ROUTE, "healthRoute": HEALTH_ROUTE}
