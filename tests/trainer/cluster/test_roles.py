"""The cluster's vocabulary: one layout type, passed between stages as its dict."""

from __future__ import annotations

import json

import pytest

from trainer.cluster.roles import POOLS, ROLES, ClusterConfigError, Layout


def test_a_layout_travels_as_its_dict_and_comes_back_whole():
    layout = Layout(workers=2, parameter_servers=1, evaluators=1)
    sent = json.loads(json.dumps(layout.to_dict()))
    assert sent == {"workers": 2, "parameter_servers": 1, "evaluators": 1}
    assert Layout.from_dict(sent) == layout
    # Through a pipeline spec's protobuf Struct, numbers arrive as floats.
    assert Layout.from_dict({"workers": 2.0, "parameter_servers": 1.0}) == \
        Layout(workers=2, parameter_servers=1)


@pytest.mark.parametrize("data,message", [
    ({"workers": 1, "chief": 1}, "a layout has no chief; its keys are workers, "
                                 "parameter_servers, evaluators"),
    ({"workers": -1}, "a layout's workers is -1; counts are 0 or more"),
])
def test_a_layout_dict_that_is_not_one_is_refused(data, message):
    with pytest.raises(ClusterConfigError, match=message):
        Layout.from_dict(data)


def test_the_clusters_words():
    layout = Layout(workers=3, parameter_servers=2)
    assert layout.training_machines == 4  # the chief and the workers
    # Under ParameterServerStrategy the workers read the data; the chief coordinates.
    assert layout.input_pipelines("parameter_server") == 3
    assert layout.input_pipelines("multi_worker_mirrored") == 4
    assert Layout().input_pipelines("single") == 1
    assert ROLES == ("chief", "worker", "ps", "evaluator")
    assert [p.ai_platform for p in POOLS] == ["master", "worker", "parameterServer",
                                              "evaluator"]
