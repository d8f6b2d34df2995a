"""The models: backbones with their own preprocessing, ImageNet weights fetched by Keras
(recorded, never faked), weights files by path and from Cloud Storage, fine-tuning, and
users' own models with their errors."""

from __future__ import annotations

import os
import textwrap
import urllib.error

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from tf_keras.src.utils import data_utils  # noqa: E402

from trainer.models.backbones import BACKBONES, WeightsError, base_of  # noqa: E402
from trainer.models.factory import ModelConfigError, build_model, unfreeze_for_fine_tuning  # noqa: E402
from trainer.models.user_model import UserModelError  # noqa: E402
from trainer.models.weights import local_weights  # noqa: E402

KERAS_APPS = "https://storage.googleapis.com/tensorflow/keras-applications/"
#: The files and hashes Keras publishes for each backbone without its top (tf-keras 2.21's
#: applications; copied here so that a wrong origin or hash is caught, not re-derived).
PUBLISHED = {
    "resnet50": ("resnet/resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5",
                 "4d473c1dd8becc155b73f8504c6f6626"),
    "efficientnet_v2_b0": ("efficientnet_v2/efficientnetv2-b0_notop.h5",
                           "893217f2bb855e2983157299931e43ff"),
    "efficientnet_v2_s": ("efficientnet_v2/efficientnetv2-s_notop.h5",
                          "af0682fb74e8c54910f2d4393339c070"),
    "mobilenet_v3_small": ("mobilenet_v3/weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5",
                           "d3e8ec802a04aa4fc771ee12a9a9b836"),
    "mobilenet_v3_large": ("mobilenet_v3/weights_mobilenet_v3_large_224_1.0_float_no_top_v2.h5",
                           "07fb09a5933dd0c8eaafa16978110389"),
    "convnext_tiny": ("convnext/convnext_tiny_notop.h5",
                      "d547c096cabd03329d7be5562c5e14798aa39ed24b474157cef5e85ab9e49ef1"),
}


@pytest.fixture
def float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    """An empty Keras cache: nothing downloaded before is found. (It must exist: Keras
    falls back to /tmp/.keras when the home's cache is not writable.)"""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".keras").mkdir()
    return tmp_path / ".keras" / "models"


@pytest.mark.parametrize("name", sorted(BACKBONES))
@pytest.mark.slow
def test_each_backbone_serves_uint8_pixels_with_its_preprocessing_inside(name, float32_policy):
    keras.utils.set_random_seed(0)
    model = build_model(keras, name, 32, 3, 0.001)
    base = base_of(keras, model)
    assert base.count_params() == BACKBONES[name].base_parameters
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3))
    as_uint8 = model(tf.constant(pixels, tf.uint8), training=False).numpy()
    as_float = model(tf.constant(pixels, tf.float32), training=False).numpy()
    np.testing.assert_allclose(as_uint8, as_float, atol=1e-5)
    np.testing.assert_allclose(as_uint8.sum(axis=-1), 1.0, atol=1e-5)
    # The preprocessing is part of the model, in front of or inside the base.
    inside = [layer.name for layer in base.layers if "rescal" in layer.name
              or "normalization" == layer.name or layer.name.endswith("prestem_normalization")]
    assert ("caffe" in [layer.name for layer in model.layers]
            if BACKBONES[name].caffe_preprocessing else inside), name


@pytest.mark.slow
def test_imagenet_weights_are_asked_of_keras_with_the_published_origin_and_hash(
        keras_home, monkeypatch):
    """A stand-in for the download alone records what Keras fetches and writes bytes
    that are not the real file: Keras's own hash check must then refuse them."""
    fetched, checked = [], []
    real_validate = data_utils.validate_file

    def download(url, path, progress=None):
        fetched.append(url)
        with open(path, "wb") as f:
            f.write(b"not the published weights")

    def validate(path, file_hash, algorithm="auto", chunk_size=65535):
        checked.append(file_hash)
        return real_validate(path, file_hash, algorithm, chunk_size)

    monkeypatch.setattr(data_utils, "urlretrieve", download)
    monkeypatch.setattr(data_utils, "validate_file", validate)
    for name, (path, digest) in PUBLISHED.items():
        fetched.clear()
        checked.clear()
        with pytest.raises(WeightsError) as error:
            build_model(keras, name, 32, 3, 0.001, weights="imagenet")
        assert fetched == [KERAS_APPS + path], name
        assert checked == [digest], name
        message = str(error.value)
        assert message.startswith("training.weights is 'imagenet'") and name in message
        assert "file hash does not match" in message and "gs://" in message
        # Where Keras put the bytes: the cache of the machine (here the test's).
        assert (keras_home / os.path.basename(path)).read_bytes() == b"not the published weights"


def test_a_failed_imagenet_fetch_is_one_clear_error(keras_home, monkeypatch):
    """Keras's real download, through a proxy on loopback that refuses connections (there
    is no network here): the error names the weights and what to do, within seconds."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("no_proxy", "")
    with pytest.raises(WeightsError) as error:
        build_model(keras, "mobilenet_v3_small", 32, 3, 0.001, weights="imagenet")
    message = str(error.value)
    assert "could not fetch the ImageNet weights of mobilenet_v3_small" in message
    assert "URL fetch failure on " + KERAS_APPS in message
    assert "storage.googleapis.com" in message and "\n" not in message
    assert urllib.error.URLError  # the failure Keras wraps


@pytest.mark.slow
def test_a_weights_file_of_the_architecture_loads_by_path_and_a_wrong_one_is_refused(
        tmp_path, float32_policy):
    keras.utils.set_random_seed(1)
    donor = keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                                input_shape=(32, 32, 3))
    path = tmp_path / "mobilenet_v3_small_notop.h5"
    donor.save_weights(str(path))
    model = build_model(keras, "mobilenet_v3_small", 32, 4, 0.001, weights=str(path),
                        freeze_base=True)
    base = base_of(keras, model)
    assert not base.trainable
    for got, want in zip(base.get_weights(), donor.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    # Only the new head trains in phase 1.
    assert [w.name for w in model.trainable_weights] == ["probabilities/kernel:0",
                                                         "probabilities/bias:0"]
    with pytest.raises(WeightsError, match=r"cannot be loaded into resnet50 .* at 32x32"):
        build_model(keras, "resnet50", 32, 4, 0.001, weights=str(path))
    with pytest.raises(WeightsError, match="does not exist"):
        build_model(keras, "resnet50", 32, 4, 0.001, weights=str(tmp_path / "none.h5"))


@pytest.mark.slow
def test_weights_are_read_from_cloud_storage(tmp_path, storage_emulator, float32_policy):
    from trainer.common.gcs import storage_client

    donor = keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                                input_shape=(32, 32, 3))
    donor.save_weights(str(tmp_path / "w.h5"))
    client = storage_client()
    client.create_bucket("mirror").blob("keras/w.h5").upload_from_filename(
        str(tmp_path / "w.h5"))
    with local_weights("gs://mirror/keras/w.h5") as path:
        model = build_model(keras, "mobilenet_v3_small", 32, 4, 0.001, weights=path)
    assert not os.path.exists(path)  # the downloaded copy lived for the build only
    np.testing.assert_array_equal(base_of(keras, model).get_weights()[0],
                                  donor.get_weights()[0])
    with local_weights("/gcs/mirror/keras/w.h5") as path:
        assert path == "/gcs/mirror/keras/w.h5"  # Vertex AI's mount, read as a file


@pytest.mark.slow
def test_fine_tuning_unfreezes_the_top_of_the_base_but_not_batch_norm(float32_policy):
    model = build_model(keras, "mobilenet_v3_small", 32, 4, 0.01, freeze_base=True)
    images = tf.random.uniform([8, 32, 32, 3], 0, 256, tf.int32, seed=1)
    labels = tf.random.uniform([8], 0, 4, tf.int64, seed=2)
    model.fit(images, labels, epochs=1, batch_size=4, verbose=0)
    steps = int(model.optimizer.iterations.numpy())
    base = base_of(keras, model)
    unfrozen = unfreeze_for_fine_tuning(keras, model, 0.25, 1e-5, jit_compile=False)
    trainable = [layer for layer in base.layers if layer.trainable and layer.weights]
    assert unfrozen == len(trainable) > 0
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in trainable)
    assert base.layers.index(trainable[0]) >= 0.75 * len(base.layers) - 1
    assert float(model.optimizer.learning_rate) == pytest.approx(1e-5)
    assert int(model.optimizer.iterations.numpy()) == steps  # one step count
    model.fit(images, labels, epochs=1, batch_size=4, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == steps + 2


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.slow
def test_resnet50_trains_in_nhwc_with_fused_batch_norm_in_each_precision(policy,
                                                                          float32_policy):
    """The training step as built, before Grappler: every batch norm fused (cuDNN's kernels
    forward and back), every convolution and its gradients in NHWC, no transpose. On GPUs
    Grappler then keeps NHWC for float16 and bfloat16 and moves float32 to NCHW unless
    `training.keep_nhwc` (`trainer.run.distribution.keep_nhwc`)."""
    keras.mixed_precision.set_global_policy(policy)
    model = build_model(keras, "resnet50", 32, 4, 0.001)

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            outputs = model(images, training=True)
            loss = keras.losses.sparse_categorical_crossentropy(labels, outputs)
        return tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(tf.TensorSpec([2, 32, 32, 3], tf.uint8),
                                       tf.TensorSpec([2], tf.int64)).graph
    ops = graph.get_operations()
    kinds = [op.type for op in ops]
    norms = [layer for layer in base_of(keras, model).layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(norms) == 53 and all(layer.fused for layer in norms)
    assert kinds.count("FusedBatchNormV3") == kinds.count("FusedBatchNormGradV3") == 53
    convolutions = [op for op in ops if op.type.startswith("Conv2D")]
    assert {op.type for op in convolutions} == {"Conv2D", "Conv2DBackpropInput",
                                                 "Conv2DBackpropFilter"}
    assert {op.get_attr("data_format") for op in convolutions} == {b"NHWC"}
    assert "Transpose" not in kinds


def test_model_option_errors():
    with pytest.raises(ModelConfigError, match="valid models are cnn, resnet50, efficientnet"):
        build_model(keras, "vgg", 32, 4, 0.1)
    with pytest.raises(ModelConfigError, match="apply to the pretrained backbones"):
        build_model(keras, "cnn", 32, 4, 0.1, freeze_base=True)
    with pytest.raises(ModelConfigError, match="convnext_tiny needs images of at least 32x32"):
        build_model(keras, "convnext_tiny", 16, 4, 0.1)


# --- users' own models ---------------------------------------------------------------

GOOD = """
import tf_keras as keras

def tiny(image_size, num_classes, width=8):
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(width, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))

def with_weights(image_size, num_classes, weights):
    model = tiny(image_size, num_classes)
    if weights:
        model.load_weights(weights)
    return model

def logits(image_size, num_classes):
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Flatten()(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))

def wrong_classes(image_size, num_classes):
    return tiny(image_size, num_classes + 1)

def wrong_input(image_size, num_classes):
    return tiny(image_size * 2, num_classes)

def not_a_model(image_size, num_classes):
    return "a model"

def broken(image_size, num_classes):
    raise RuntimeError("width must be even")
"""


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A package of models in a directory of its own, imported afresh by each test."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m.split(".")[0] == "team_models"]:
        monkeypatch.delitem(sys.modules, name)
    package = tmp_path / "code" / "team_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(textwrap.dedent(GOOD))
    (package / "fails.py").write_text("import tf_keras\nVALUE = 1 / 0\n")
    return str(tmp_path / "code")


def test_a_user_model_is_wrapped_with_the_trainers_input_and_output(user_code, float32_policy):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model(keras, "team_models.nets:tiny", 32, 4, 0.01, user_code=user_code)
    assert model.input_names == ["image"] and model.output_names == ["probabilities"]
    out = model(tf.zeros([2, 32, 32, 3], tf.uint8))
    assert out.dtype == tf.float32 and out.shape == (2, 4)
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)


def test_a_user_model_gets_the_weights_when_it_takes_them(user_code, tmp_path,
                                                          float32_policy):
    from trainer.models.user_model import build_user_model

    donor = build_user_model(keras, "team_models.nets:tiny", image_size=32, num_classes=4,
                             user_code=user_code)
    donor.save_weights(str(tmp_path / "mine.h5"))
    model = build_model(keras, "team_models.nets:with_weights", 32, 4, 0.01,
                        weights=str(tmp_path / "mine.h5"), user_code=user_code)
    np.testing.assert_array_equal(model.get_weights()[0], donor.get_weights()[0])
    with pytest.raises(UserModelError, match="team_models.nets:tiny takes no weights keyword"):
        build_model(keras, "team_models.nets:tiny", 32, 4, 0.01, weights="imagenet",
                    user_code=user_code)


@pytest.mark.parametrize("reference, expected", [
    ("team_models.missing:tiny", r"module team_models.missing cannot be imported \(No module "
                                 r"named 'team_models.missing'\); it must be in "
                                 r"training.user_code"),
    ("team_models.fails:build", r"importing team_models.fails failed: .*fails.py:2: "
                                r"ZeroDivisionError: division by zero"),
    ("team_models.nets:nothing", r"has no function nothing; it defines broken, logits, "
                                 r"not_a_model, tiny, with_weights, wrong_classes, wrong_input"),
    ("team_models.nets:broken", r"failed when called with image_size=32, num_classes=4: "
                                r".*nets.py:\d+: RuntimeError: width must be even"),
    ("team_models.nets:not_a_model", r"returned a builtins.str; expected a tf.keras Model"),
    ("team_models.nets:wrong_classes", r"output has shape \(None, 5\); expected \(None, 4\)"),
    ("team_models.nets:wrong_input", r"input has shape \(None, 64, 64, 3\); expected "
                                     r"\(None, 32, 32, 3\)"),
    ("team_models.nets:logits", r"not class probabilities .* end it with a softmax"),
])
def test_a_user_model_that_breaks_the_contract_is_one_clear_error(user_code, reference,
                                                                  expected, float32_policy):
    with pytest.raises(UserModelError, match=expected) as error:
        build_model(keras, reference, 32, 4, 0.01, user_code=user_code)
    assert str(error.value).startswith(f"training.model {reference!r}") or \
        str(error.value).startswith(f"training.model is {reference!r}")
