"""The model options at the front doors: the config file, the command line and Vertex AI's
pre-flight; the examples; a user's code in the build context and the request."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from components import images
from components.build.context import write_build_context
from pipelines.cli import main
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from pipelines.pipeline_arguments import vertex_arguments
from pipelines.vertex.preflight import VertexSettingsError, require_vertex_settings
from tests.support.paths import ROOT
from trainer.common.schema import OptionsError, to_flags, validate
from trainer.run.training_options import TrainingOptions

# Exercised here without an import, through `gpu-pipeline` (a subprocess builds the
# model): `pipelines.model_check`.

EXAMPLES = ROOT / "examples"
VERTEX = {"project": "my-project", "pipeline_root": "gs://my-bucket/root",
          "image_repository": "us-central1-docker.pkg.dev/my-project/images"}

BIN = Path(sys.executable).parent / "gpu-pipeline"


@pytest.fixture
def code(tmp_path):
    package = tmp_path / "code" / "their_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text("def build(image_size, num_classes):\n    pass\n")
    return tmp_path / "code"


@pytest.mark.parametrize("training, message", [
    ({"model": "vgg16"}, "training.model is 'vgg16'; expected one of cnn, resnet50, "
                         "efficientnet_v2_b0, efficientnet_v2_s, mobilenet_v3_small, "
                         "mobilenet_v3_large, convnext_tiny, or package.module:function"),
    ({"model": "pkg.mod"}, "training.model is 'pkg.mod'; expected one of cnn"),
    ({"model": "cnn", "weights": "imagenet"}, "training.weights is 'imagenet'; model cnn "
                                              "takes none"),
    ({"model": "cnn", "fine_tune_epochs": 2}, "training.fine_tune_epochs is 2; it applies to "
                                              "the pretrained backbones"),
    ({"model": "a.b:c", "freeze_base": True}, "training.freeze_base is true; it applies to the "
                                              "pretrained backbones (resnet50"),
    ({"model": "resnet50", "user_code": "/x"}, "training.user_code is '/x', but model is "
                                               "'resnet50', a built-in model"),
    ({"epochs": 3, "warmup_epochs": 3}, "training.warmup_epochs is 3; expected fewer than "
                                        "epochs (3)"),
    ({"fine_tune_fraction": 0}, "training.fine_tune_fraction is 0; expected a finite number "
                                "in (0, 1]"),
])
def test_bad_model_options_are_refused_with_the_field_and_what_is_valid(training, message):
    with pytest.raises(OptionsError) as error:
        validate(TrainingOptions, training, prefix="training")
    assert message in str(error.value)


def test_files_are_checked_at_load_and_relative_to_the_config_file(tmp_path, code,
                                                                  monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (tmp_path / "w.h5").write_bytes(b"weights")
    path = folder / "run.yaml"
    path.write_text("training:\n  model: their_models.nets:build\n  user_code: ../code\n"
                    "  weights: ../w.h5\n")
    monkeypatch.chdir(ROOT)  # not where the config file is
    config = load_config(path)
    assert config.training.user_code == str(code.resolve())
    assert config.training.weights == str((tmp_path / "w.h5").resolve())
    # On the command line, relative to the working directory.
    monkeypatch.chdir(tmp_path)
    config = load_config(overrides={"training": {"model": "their_models.nets:build",
                                                 "user_code": "code"}})
    assert config.training.user_code == str(code.resolve())
    assert load_config(overrides={"training": {"model": "resnet50",
                                               "weights": "gs://m/w.h5"}}).training.weights \
        == "gs://m/w.h5"

    with pytest.raises(ConfigError) as error:
        load_config(overrides={"training": {"model": "their_models.other:build",
                                            "user_code": "code", "weights": "none.h5"}})
    text = str(error.value)
    assert f"training.weights is '{tmp_path / 'none.h5'}', which is not a file" in text
    assert ("training.model is 'their_models.other:build', but its module is not in "
            f"training.user_code '{code}' (looked for {code}/their_models/other.py and "
            f"{code}/their_models/other/__init__.py)") in text
    with pytest.raises(ConfigError, match="training.user_code is '.*missing', which is not a "
                                          "directory"):
        load_config(overrides={"training": {"model": "a.b:c", "user_code": "missing"}})
    with pytest.raises(ConfigError, match="its module is not installed, and "
                                          "training.user_code is not set"):
        load_config(overrides={"training": {"model": "no_such_package.x:y"}})


def test_vertex_refuses_what_its_machines_cannot_read(tmp_path, code):
    (tmp_path / "w.h5").write_bytes(b"weights")
    config = load_config(overrides={"vertex": VERTEX, "dataset": {"source": "gs://my-bucket/photos"},
                                    "training": {"model": "resnet50",
                                                 "weights": str(tmp_path / "w.h5")}})
    with pytest.raises(VertexSettingsError, match="a file on this machine, which Vertex AI's "
                                                  "machines cannot read; copy it to Cloud "
                                                  "Storage"):
        require_vertex_settings(config)
    installed = load_config(overrides={"vertex": VERTEX, "dataset": {"source": "gs://my-bucket/p"},
                                       "training": {"model": "json.decoder:JSONDecoder"}})
    with pytest.raises(VertexSettingsError, match="set training.user_code to the directory"):
        require_vertex_settings(installed)


def test_user_code_is_in_the_build_context_and_the_digest_follows_it(tmp_path, code):
    (code / "their_models" / "__pycache__").mkdir()
    (code / "their_models" / "__pycache__" / "nets.cpython-311.pyc").write_bytes(b"x")
    (code / "their_models" / "service-key.json").write_text("secret")
    without = write_build_context(tmp_path / "a")
    first = write_build_context(tmp_path / "b", user_code=code)
    assert set(first.files) - set(without.files) == {"user_code/their_models/__init__.py",
                                                     "user_code/their_models/nets.py"}
    with tarfile.open(first.tarball) as tar:
        assert tar.extractfile("user_code/their_models/nets.py").read() == \
            (code / "their_models" / "nets.py").read_bytes()
    assert first.digest != without.digest
    changed = write_build_context(tmp_path / "c", user_code=code)
    assert changed.digest == first.digest  # same code, same digest
    # Version control, environments and caches of the user's folder stay out: a token in
    # .git/config never reaches the image, and it does not change the digest.
    for leftover in (".git/config", ".git/objects/ab/cdef", ".hg/hgrc", ".svn/entries",
                     ".venv/lib/site.py", "venv/bin/python", ".pytest_cache/v/x",
                     "their_models/__pycache__/nets.cpython-311.pyc",
                     ".ipynb_checkpoints/n.ipynb"):
        (code / leftover).parent.mkdir(parents=True, exist_ok=True)
        (code / leftover).write_text("url = https://user:token@git.example/x\n")
    assert write_build_context(tmp_path / "d", user_code=code).digest == first.digest
    (code / "their_models" / "nets.py").write_text("def build(**kwargs):\n    pass\n")
    assert write_build_context(tmp_path / "e", user_code=code).digest != first.digest
    # The image copies the whole context (and so user_code/) below its WORKDIR.
    for image in images.PROJECT_IMAGES:
        dockerfile = (ROOT / image.dockerfile).read_text()
        assert "WORKDIR /app" in dockerfile and "COPY . ./" in dockerfile
    assert "!user_code/" in (ROOT / ".dockerignore").read_text()


def test_the_trainer_on_vertex_reads_user_code_where_the_image_holds_it(code):
    config = load_config(overrides={"vertex": VERTEX, "training": {
        "model": "their_models.nets:build", "user_code": str(code)}})
    training = vertex_arguments(config)["training"]
    assert training["user_code"] == "/app/user_code"
    assert training["model"] == "their_models.nets:build"
    flags = to_flags(TrainingOptions(**training))
    assert flags[flags.index("--user-code") + 1] == "/app/user_code"


@pytest.mark.parametrize("example", ["multiworker_lab", "user_model"])
@pytest.mark.slow
def test_the_examples_pass_validation_and_a_dry_run(example, capsys):
    config = EXAMPLES / example / "config.yaml"
    assert main(["validate-gpu", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["submit", "--dry-run", "--verbose", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    job = _pipeline_job(out)
    training = job["runtimeConfig"]["parameterValues"]["training"]
    if example == "multiworker_lab":  # the lab: ImageNet ResNet50, 300x300, two V100s
        assert (training["model"], training["weights"]) == ("resnet50", "imagenet")
        assert (training["epochs"], training["fine_tune_epochs"]) == (2, 3)
        assert job["runtimeConfig"]["parameterValues"]["dataset"]["image_size"] == 300
        pools = job["runtimeConfig"]["parameterValues"]["vertex"]["worker_pool_specs"]
        assert [(p["machine_spec"]["accelerator_type"], p["replica_count"]) for p in pools] \
            == [("NVIDIA_TESLA_V100", 1)] * 2
    else:
        assert training["model"] == "team_models.wide_cnn:build"
        assert training["user_code"] == "/app/user_code"
        assert "your model team_models.wide_cnn:build: 3 file(s) of " in out
        assert "user_code/team_models/wide_cnn.py" in out


def _pipeline_job(out: str) -> dict:
    """The PipelineJob of the dry run's CreatePipelineJobRequest (the last JSON printed)."""
    start = out.rindex('{\n  "parent"')
    request, _ = json.JSONDecoder().raw_decode(out[start:])
    return request["pipelineJob"]


BROKEN = {
    "signature": ("def build(size, classes):\n    pass\n",
                  "is build(size, classes), which cannot be called as build(image_size=32, "
                  "num_classes=4) (missing a required argument: 'size'); the contract calls "
                  "it with the keywords image_size and num_classes"),
    "output": ("import tf_keras as keras\n\ndef build(image_size, num_classes):\n"
               "    return keras.Sequential([keras.Input((image_size, image_size, 3)),\n"
               "        keras.layers.Flatten(), keras.layers.Dense(7, activation='softmax')])\n",
               "returned a model whose output has shape (None, 7); expected (None, 4)"),
}


@pytest.mark.parametrize("broken", BROKEN, ids=str)
@pytest.mark.slow
def test_a_wrong_user_model_is_refused_before_any_stage_runs(tmp_path, broken):
    source, message = BROKEN[broken]
    package = tmp_path / "code" / "their_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(source)
    result = subprocess.run([str(BIN), "run", "--local", "--model", "their_models.nets:build",
                             "--user-code", str(tmp_path / "code")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: training.model 'their_models.nets:build' ")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "local_runs").exists()  # no stage ran
