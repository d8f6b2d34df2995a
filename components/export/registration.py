"""Stage 5 on Vertex AI: how the gate's decision is registered in the Model Registry.

The model is served by `vertex.serving_image`, by default the run's own CPU image (by
digest, from stage 3's `images`), which runs the TensorFlow it was trained with. A new
version becomes the default only with the `default` alias (Vertex AI docs: "How to use
model version aliases"); without it, the champion stays the default, and with an endpoint
the deploy stage moves the alias once the canary is promoted. The parent model is imported
as gcpc's `VertexModel` artifacts are: its URI is the resource's API URL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from components.cloud_names import vertex_resource_uri

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions


@dataclasses.dataclass(frozen=True)
class Registration:
    """What the model upload is given (the component's outputs, in this order)."""

    register: bool
    region: str
    display_name: str
    parent_model: str
    parent_model_uri: str
    serving_image: str
    version_aliases: list[str]
    #: The batch step follows a promotion (`vertex.batch_predict.source` is set); without
    #: it no batch pod starts at all.
    batch: bool = False
    #: `vertex.encryption_key`, which gcpc's upload and batch prediction ops take one by
    #: one (their `encryption_spec_key_name` defaults to ""; the PipelineJob's does not
    #: reach them).
    encryption_key: str = ""

    def lines(self, default: bool) -> list[str]:
        """What the step says."""
        return [f"registration: {'registering' if self.register else 'not registered'}"
                + (" as the default version" if self.register and default else
                   " as a non-default version" if self.register and self.parent_model
                   else ""),
                f"registration: served by {self.serving_image}"]


def registration(options: VertexOptions, register: bool, default: bool,
                 images: Mapping[str, Any]) -> Registration:
    """The registration of the gate's decision (`register`, `default`) under the run's
    `VertexOptions`, served by the run's CPU image from stage 3's `images` unless
    `vertex.serving_image` names another."""
    aliases = ["default"] if default and options.parent_model and not options.deploy.endpoint \
        else []
    return Registration(
        register, options.region, options.model_display_name, options.parent_model,
        vertex_resource_uri(options.region, options.parent_model) if options.parent_model
        else "", options.serving_image or images["cpu"]["reference"], aliases,
        bool(options.batch_predict.source), options.encryption_key)
