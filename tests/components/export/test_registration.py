"""How stage 5 registers the gate's decision on Vertex AI (`registration`)."""

from __future__ import annotations

from components.export.registration import registration
from components.vertex_options import VertexOptions

IMAGES = {"cpu": {"reference": "us-central1-docker.pkg.dev/p/r/gpu-pipeline-cpu@sha256:ab"}}
PARENT = "projects/p/locations/us-central1/models/7"
SERVING = "us-docker.pkg.dev/p/r/serve@sha256:" + "c" * 64


def test_a_new_default_version_takes_the_alias_unless_an_endpoint_rolls_it_out():
    won = registration(VertexOptions(parent_model=PARENT), True, True, IMAGES)
    assert won.version_aliases == ["default"] and won.serving_image == IMAGES["cpu"]["reference"]
    assert won.parent_model_uri == f"https://us-central1-aiplatform.googleapis.com/v1/{PARENT}"
    assert won.lines(True) == ["registration: registering as the default version",
                               f"registration: served by {IMAGES['cpu']['reference']}"]
    rolled = registration(VertexOptions(parent_model=PARENT, deploy={"endpoint": "serving"}),
                          True, True, IMAGES)
    assert rolled.version_aliases == []  # the deploy stage moves it once promoted
    lost = registration(VertexOptions(parent_model=PARENT), True, False, IMAGES)
    assert lost.version_aliases == [] and lost.lines(False)[0] == \
        "registration: registering as a non-default version"


def test_a_first_model_has_no_parent_and_a_serving_image_can_be_named():
    first = registration(VertexOptions(serving_image=SERVING), True, True, IMAGES)
    assert (first.parent_model, first.parent_model_uri, first.version_aliases) == ("", "", [])
    assert first.serving_image == SERVING
