"""The training plan applied to TensorFlow: the distribution strategy with its all-reduce,
Keras's mixed-precision policy (XLA is the model's `jit_compile`, `trainer.models`), and the
convolutions' layout on GPUs (the plan's `keep_nhwc`)."""

from __future__ import annotations

from typing import Any

from trainer.cluster.training_plan import TrainingPlan


def communication_options(tf: Any, plan: TrainingPlan) -> Any:
    """MultiWorkerMirroredStrategy's all-reduce as the plan says: NCCL on GPUs (with the
    default AUTO, TensorFlow all-reduces GPU tensors through host memory over gRPC:
    `trainer.cluster.training_plan`), TensorFlow's ring on CPUs. NCCL runs with its own defaults
    (its network plugin, when the image has Vertex AI's Reduction Server one, is found on
    the library path); set NCCL_* variables in the pool's environment to change them."""
    implementation = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if plan.all_reduce == "nccl"
        else implementation.RING)


def create_strategy(tf: Any, plan: TrainingPlan) -> Any:
    """The plan's strategy; must run before any other TF op. With `plan.prefetch_to_gpu`, a
    machine with one GPU trains under a one-device strategy, whose distributed dataset
    copies the next batches to the GPU while a step runs (the default strategy hands Keras
    the host's batches, copied inside each step)."""
    if plan.strategy == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    if plan.strategy == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=communication_options(tf, plan))
    gpus = len(tf.config.list_physical_devices("GPU"))
    if gpus > 1:
        # Its default all-reduce between one machine's GPUs is NCCL (NcclAllReduce).
        return tf.distribute.MirroredStrategy()
    if gpus == 1 and plan.prefetch_to_gpu:
        return tf.distribute.OneDeviceStrategy("/gpu:0")
    return tf.distribute.get_strategy()


def apply_precision(keras: Any, plan: TrainingPlan) -> None:
    """Keras's global mixed-precision policy, as the plan says (before the model is built)."""
    if plan.mixed_precision != "off":
        keras.mixed_precision.set_global_policy(plan.policy)


def keep_nhwc(tf: Any, keep: bool) -> bool:
    """With `keep` (the plan's `keep_nhwc`) on a machine with GPUs, turns Grappler's layout
    optimizer off, so that the convolutions run in the model's NHWC layout; returns whether
    it did (before the first step is traced).

    On GPUs that optimizer rewrites NHWC convolutions to NCHW, with transposes around them,
    unless at least half of them are float16 (Volta or newer), bfloat16 (Ampere or newer) or
    TF32 float32 without a float32 convolution gradient
    (tensorflow/core/grappler/optimizers/generic_layout_optimizer.cc,
    GetSrcAndDstDataFormats): mixed precision stays NHWC, float32 training goes to NCHW. On
    an H200, float32's step spent 11.2% of its time in those transposes and ran its batch
    norm and biases in NCHW kernels (docs/performance.md).
    """
    if not keep or not tf.config.list_physical_devices("GPU"):
        return False
    # Holds after the strategy started TensorFlow's context: setting it drops the function
    # call options that carry Grappler's config (eager/context.py), so the step traced
    # next gets it.
    tf.config.optimizer.set_experimental_options({"layout_optimizer": False})
    return True
