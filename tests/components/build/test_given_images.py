"""`vertex.images`: the project's two images built elsewhere, by digest, both or neither;
the build stage passes them on and touches no cloud service."""

from __future__ import annotations

import pytest

from components.build.build_images import run_build_stage
from components.build.given_images import GivenImages
from trainer.common.errors import InputError
from trainer.common.schema import validate

REPO = "us-central1-docker.pkg.dev/team-proj/ci"
GPU, CPU = f"{REPO}/trainer@sha256:{'a' * 64}", f"{REPO}/components@sha256:{'b' * 64}"


def test_both_images_by_digest_or_neither():
    assert not GivenImages().given
    given = validate(GivenImages, {"gpu": GPU, "cpu": CPU}, prefix="vertex.images")
    assert given.found() == {"gpu": {"reference": GPU, "tag": "", "built": False},
                             "cpu": {"reference": CPU, "tag": "", "built": False}}
    with pytest.raises(InputError, match="cpu is empty while gpu is set; give both images"):
        validate(GivenImages, {"gpu": GPU}, prefix="vertex.images")
    with pytest.raises(InputError, match=r"vertex\.images\.cpu is .*; expected an image by "
                                         "digest"):
        validate(GivenImages, {"gpu": GPU, "cpu": f"{REPO}/components:latest"},
                 prefix="vertex.images")


def test_the_build_stage_passes_given_images_on_without_a_cloud_call(tmp_path):
    lines: list[str] = []

    class Untouchable:  # any call to a cloud client fails the test
        def __getattr__(self, name):
            raise AssertionError(f"a cloud client was used: {name}")

    given = GivenImages(gpu=GPU, cpu=CPU).found()
    found, metadata = run_build_stage(
        str(tmp_path / "context"), "gs://bucket/context", REPO, push=True,
        clients=(Untouchable(), Untouchable(), Untouchable()), given=given, log=lines.append)
    assert found == given and metadata["given"] is True
    assert metadata["references"] == {"gpu": GPU, "cpu": CPU}
    assert lines == [f"images given by vertex.images (built elsewhere), nothing built: gpu "
                     f"{GPU}, cpu {CPU}"]
