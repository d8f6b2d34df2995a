"""Online prediction from a Vertex AI endpoint: the request `gpu-pipeline predict --config`
sends (and prints with `--dry-run`), and what the answer says.

The request is PredictionService.Predict (REST: `POST https://REGION-aiplatform.googleapis.com
/v1/{endpoint}:predict`, body `{"instances": [...]}`; Vertex AI docs: "Get online
predictions from a custom trained model"). The endpoint passes the body to the serving
container unchanged, so every instance is what `trainer.serving.app` takes:
`{"b64": "<base64 image>"}`. The answer names the deployed model that served it
(`deployedModelId`, `model`, `modelVersionId`): with a canary on the endpoint, the request
is served by whichever model the traffic split picked.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from components.cloud_names import vertex_endpoint
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError, StageError
from trainer.serving.container import encoded_instance


class EndpointNotFound(InputError):
    """The endpoint the user named does not exist."""


class UnexpectedAnswer(StageError):
    """The endpoint answered, but not as the project's serving container does."""


@dataclasses.dataclass
class Answer:
    """The endpoint's answer: one prediction per image, and who gave them."""

    predictions: list[dict[str, Any]]
    deployed_model_id: str
    model: str  # projects/.../models/ID@VERSION
    class_names: list[str] | None  # from the model's metadata; None when unreadable


def instances(images: list[bytes]) -> list[dict[str, str]]:
    """The request's instances: each image base64-encoded, as the serving container takes
    them (`trainer.serving.app`)."""
    return [encoded_instance(image) for image in images]


def predict_url(region: str, endpoint: str, address: str = "") -> str:
    """The REST URL of an endpoint's Predict method: on Vertex AI's regional host, or for a
    Private Service Connect endpoint on the PSC endpoint's `address` in the caller's
    network (aiplatform's PrivateEndpoint.predict: `https://ADDRESS/v1/projects/P/
    locations/R/endpoints/ID:predict`; a base URL is taken as it is)."""
    if address:
        base = address if "://" in address else f"https://{address}"
        return f"{base.rstrip('/')}/v1/{endpoint}:predict"
    return f"https://{vertex_endpoint(region)}/v1/{endpoint}:predict"


def dry_run_lines(region: str, endpoint: str, images: list[bytes],
                  address: str = "") -> list[str]:
    """What `--dry-run` prints: the request, with each image's base64 shortened, and the
    same request as a shell command."""
    shown = {"instances": [{"b64": f"<{len(image)} bytes of base64 image>"}
                           for image in images]}
    url = predict_url(region, endpoint, address)
    return [f"POST {url}" + (" (the endpoint's Private Service Connect address)" if address
                             else ""),
            "Content-Type: application/json",
            json.dumps(shown, indent=2),
            "The same request from a shell (one image):",
            "  printf '{\"instances\": [{\"b64\": \"%s\"}]}' \"$(base64 -w0 IMAGE.png)\" | "
            "curl -s -H \"Authorization: Bearer $(gcloud auth print-access-token)\" "
            f"-H 'Content-Type: application/json' {'--insecure ' if address else ''}-d @- {url}"]


def find_endpoint(named: str, project: str, region: str) -> str:
    """The resource name of the endpoint with display name `named` (the deploy stage's
    lookup, without creating it)."""
    from google.cloud import aiplatform_v1

    from components.serving import vertex_endpoint as endpoints

    with remote_call("connecting to Vertex AI"):
        client = aiplatform_v1.EndpointServiceClient(
            client_options={"api_endpoint": vertex_endpoint(region)})
    found = endpoints.find_or_create(endpoints.Clients(client, None, None), project, region,
                                     named, create=False)
    if found is None:
        raise EndpointNotFound(
            f"no endpoint is named {named!r} in project {project}, {region}; the deploy stage "
            "creates it when it first promotes a model (vertex.deploy.endpoint)")
    return found.name


def predict(endpoint: str, region: str, images: list[bytes], *, client: Any = None,
            models: Any = None, address: str = "", session: Any = None) -> Answer:
    """Sends the images to the endpoint (its resource name) in one request.

    Args:
        endpoint: The endpoint's resource name.
        region: Its region (the API host).
        images: Encoded images (`trainer.serving.container.FORMATS`).
        client: A PredictionServiceClient (made for the region when None).
        models: A ModelServiceClient to read the class names with (made when None).
        address: For a Private Service Connect endpoint, the PSC endpoint's IP address or
            DNS name in this network (the request goes there, not to Vertex AI's host).
        session: The HTTP session of a PSC request (an authorized one when None).
    """
    from google.cloud import aiplatform_v1

    options = {"api_endpoint": vertex_endpoint(region)}
    with remote_call("connecting to Vertex AI"):
        models = models or aiplatform_v1.ModelServiceClient(client_options=options)
    answer = _private_answer(predict_url(region, endpoint, address), endpoint, images,
                             session) if address else \
        _public_answer(endpoint, images, client or _prediction_client(options))
    predictions = answer.get("predictions", [])
    if len(predictions) != len(images) or not all(
            isinstance(p, dict) and isinstance(p.get("probabilities"), list)
            for p in predictions):
        raise UnexpectedAnswer(
            f"{endpoint} answered {json.dumps(answer)[:300]} for {len(images)} images, not "
            "one {\"class_name\", \"probabilities\", ...} per image; is it serving a model of "
            "this project?")
    model = answer.get("model", "")
    if answer.get("modelVersionId"):
        model = f"{model}@{answer['modelVersionId']}"
    return Answer(predictions, answer.get("deployedModelId", ""), model,
                  _class_names(model, models))


def _prediction_client(options: dict[str, str]) -> Any:
    from google.cloud import aiplatform_v1

    with remote_call("connecting to Vertex AI"):
        return aiplatform_v1.PredictionServiceClient(client_options=options)


def _public_answer(endpoint: str, images: list[bytes], client: Any) -> dict[str, Any]:
    """PredictionService.Predict on Vertex AI's host, its answer as JSON."""
    from google.api_core import exceptions
    from google.protobuf import json_format, struct_pb2

    values = [json_format.ParseDict(x, struct_pb2.Value()) for x in instances(images)]
    with remote_call(f"asking {endpoint} for predictions"):
        try:
            response = client.predict(endpoint=endpoint, instances=values)
        except exceptions.NotFound as exc:
            raise EndpointNotFound(f"{endpoint} was not found: {exc.message}") from None
        except (exceptions.BadRequest, exceptions.FailedPrecondition) as exc:
            # What the serving container (or the endpoint) refused: the user's request.
            raise InputError(f"{endpoint} refused the request: {exc.message}") from None
    return json_format.MessageToDict(type(response).pb(response))


def _private_answer(url: str, endpoint: str, images: list[bytes], session: Any) -> dict[str, Any]:
    """The same request through the endpoint's Private Service Connect address, as
    aiplatform's PrivateEndpoint.predict sends it: the caller's credentials on an
    authorized session, without checking the certificate (the address is an IP or a private
    DNS name, which the endpoint's certificate does not name)."""
    import warnings

    if session is None:
        from google.auth.transport.requests import AuthorizedSession

        from trainer.common.cloud_calls import default_credentials

        with remote_call("connecting to Vertex AI"):
            credentials, _ = default_credentials()
        session = AuthorizedSession(credentials)
        session.verify = False
    with remote_call(f"asking {endpoint} for predictions at {url}"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning, said above
        answer = session.post(url, data=json.dumps({"instances": instances(images)}),
                              headers={"Content-Type": "application/json"}, timeout=60)
    try:
        body = answer.json()
    except ValueError:
        body = {"error": {"message": answer.text[:300]}}
    message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
    if answer.status_code == 404:
        raise EndpointNotFound(f"{endpoint} was not found at {url}: {message}")
    if answer.status_code in (400, 412):
        raise InputError(f"{endpoint} refused the request: {message}")
    if answer.status_code != 200:
        raise UnexpectedAnswer(f"{url} answered HTTP {answer.status_code}: {message or body}")
    return body


def _class_names(model: str, models: Any) -> list[str] | None:
    """The served model's class names, from the metadata file beside its SavedModel; None
    when the model or the file cannot be read (the predictions still carry the top class)."""
    from google.api_core import exceptions

    from trainer.common.gcs import read_bytes
    from trainer.serving.container import METADATA_FILE

    if not model:
        return None
    try:
        uri = models.get_model(name=model).artifact_uri
        return list(json.loads(read_bytes(f"{uri.rstrip('/')}/{METADATA_FILE}"))["class_names"])
    except (exceptions.GoogleAPICallError, OSError, ValueError, KeyError):
        return None
