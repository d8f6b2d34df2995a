"""The training plan: strategy, all-reduce, mixed precision and XLA decided once, from the
validated pools, for every GPU family of the catalog and every pool layout of the seeds;
what cannot work is refused before anything is spent; the trainer applies the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components import images
from components.gpu import catalog as cat
from components.gpu.pools import (
    REDUCTION_SERVER,
    check_pools,
    check_reduction_server,
    plan_for_pools,
)
from components.gpu.worker_pool import parse_pools
from tests.support.facts import missing
from tests.support.paths import ROOT
from trainer.cluster.accelerators import ACCELERATORS
from trainer.cluster.roles import ClusterConfigError, Layout
from trainer.cluster.tf_config import cluster_from_env
from trainer.cluster.training_plan import PlanError, TrainingPlan, plan_training
from trainer.run.training_options import TrainingOptions

BIN = Path(sys.executable).parent / "gpu-pipeline"
RS_IMAGE = f"{REDUCTION_SERVER}:latest"


def pool(machine, gpu=None, count=0, replicas=1, image=None):
    spec = {"machine_type": machine}
    if gpu:
        spec.update(accelerator_type=gpu, accelerator_count=count)
    out = {"machine_spec": spec, "replica_count": replicas}
    if image:
        out["container_spec"] = {"image_uri": image}
    return out


#: A machine of each GPU family the catalog accepts, and what the plan chooses for two of
#: them under MultiWorkerMirroredStrategy: (all-reduce, mixed precision, XLA, NVIDIA's
#: environment). Hopper's is what its results files measured fastest
#: (`trainer/cluster/measured/`); the others were not measured: XLA off, the precision their
#: tensor cores compute.
FAMILIES = {
    cat.P4: (("n1-standard-8", 1), ("nccl", "off", False, False)),
    cat.P100: (("n1-standard-8", 1), ("nccl", "off", False, False)),
    cat.V100: (("n1-standard-8", 1), ("nccl", "float16", False, False)),
    cat.T4: (("n1-standard-8", 1), ("nccl", "float16", False, False)),
    cat.A100: (("a2-highgpu-1g", 1), ("nccl", "bfloat16", False, False)),
    cat.A100_80GB: (("a2-ultragpu-1g", 1), ("nccl", "bfloat16", False, False)),
    cat.L4: (("g2-standard-8", 1), ("nccl", "bfloat16", False, False)),
    # Its own file compared float32 with bfloat16 (1,525 against 1,477 images/s) and never
    # ran float16; the environment stands in from the H200's.
    cat.H100_80GB: (("a3-highgpu-8g", 8), ("nccl", "off", False, True)),
    cat.H100_MEGA: (("a3-megagpu-8g", 8), ("nccl", "off", False, True)),
    cat.H200: (("a3-ultragpu-8g", 8), ("nccl", "float16", False, True)),
}


def test_every_catalog_gpu_has_its_architecture_and_a_decision():
    assert set(ACCELERATORS) == set(cat.ACCELERATOR_TYPES)
    refused = {cat.K80, cat.B200, cat.GB200}  # no CUDA 12 / the image's libraries; Arm
    assert set(FAMILIES) == set(cat.ACCELERATOR_TYPES) - refused


@pytest.mark.parametrize("gpu", sorted(FAMILIES))
def test_the_plan_of_each_gpu_family(gpu):
    (machine, count), expected = FAMILIES[gpu]
    result = check_pools([pool(machine, gpu, count), pool(machine, gpu, count, replicas=3)],
                         region="us-central1" if gpu not in (cat.P4,) else "us-east4")
    assert result.ok, result.errors
    plan = result.plan
    assert plan.strategy == "multi_worker_mirrored" and plan.accelerator == gpu
    assert (plan.all_reduce, plan.mixed_precision, plan.xla, plan.nvidia_environment) == expected
    assert set(plan.reasons) == {"strategy", "all_reduce", "mixed_precision", "xla",
                                 "nvidia_environment", "keep_nhwc", "prefetch_to_gpu"}
    assert all(plan.reasons.values())
    # Under parameter servers: no all-reduce, no XLA, and no float16 (loss scaling).
    ps = plan_for_pools(parse_pools([pool(machine, gpu, count),
                                     pool(machine, gpu, count, replicas=2),
                                     pool("n1-highmem-8")]))
    bf16 = ACCELERATORS[gpu].bfloat16 and ACCELERATORS[gpu].architecture != "Hopper"
    assert (ps.strategy, ps.all_reduce, ps.mixed_precision, ps.xla) == \
        ("parameter_server", "none", "bfloat16" if bf16 else "off", False)


@pytest.mark.parametrize("gpu,machine,why", [
    (cat.K80, "n1-standard-8", "are supported up to CUDA 11"),
    (cat.B200, "a4-highgpu-8g", "cuBLAS 12.5 (needs 12.8+) and cuDNN 9.3 (needs 9.7+)"),
])
def test_gpus_the_image_cannot_serve_are_refused_with_the_reason(gpu, machine, why):
    count = 8 if gpu == cat.B200 else 1
    result = check_pools([pool(machine, gpu, count)])
    assert not result.ok and result.plan is None
    assert f"accelerator_type {gpu} cannot run the trainer image" in result.errors[0]
    assert why in result.errors[0]


def test_blackwell_gets_no_xla_even_in_the_plan_itself():
    plan = plan_training(Layout(workers=1), gpu=ACCELERATORS[cat.B200], gpus=8)
    assert not plan.xla and "cannot target NVIDIA_B200 (Blackwell" in plan.reasons["xla"]
    with pytest.raises(PlanError, match="training.xla is on, but TensorFlow 2.21's XLA"):
        plan_training(Layout(workers=1), xla="on", gpu=ACCELERATORS[cat.B200], gpus=8)


def test_the_seeds_layouts():
    t4 = pool("n1-highcpu-16", cat.T4, 4)
    # 000/002: master + 9 workers with 4 x T4, 3 CPU parameter servers.
    seeds = plan_for_pools(parse_pools([t4, {**t4, "replica_count": 9},
                                        pool("n1-highmem-8", replicas=3)]))
    assert (seeds.strategy, seeds.all_reduce, seeds.mixed_precision, seeds.xla) == \
        ("parameter_server", "none", "off", False)
    assert "float16 needs loss scaling" in seeds.reasons["mixed_precision"]
    # 003: the multi-worker lab, chief + 1 worker with a V100 each; and its CPU variant.
    v100 = pool("n1-standard-8", cat.V100, 1)
    lab = plan_for_pools(parse_pools([v100, v100]))
    assert (lab.strategy, lab.all_reduce, lab.mixed_precision, lab.xla) == \
        ("multi_worker_mirrored", "nccl", "float16", False)
    cpu = plan_for_pools(parse_pools([pool("n1-standard-8"), pool("n1-standard-8")]))
    assert (cpu.all_reduce, cpu.mixed_precision, cpu.xla) == ("ring", "off", False)
    # One machine: MirroredStrategy over its GPUs with NCCL, or nothing to reduce.
    single = plan_for_pools(parse_pools([pool("a2-highgpu-8g", cat.A100, 8)]))
    assert (single.strategy, single.all_reduce, single.xla) == ("single", "nccl", False)
    assert plan_for_pools(parse_pools([pool("n1-standard-8", cat.T4, 1)])).all_reduce == "none"


@pytest.mark.parametrize("pools,options,message", [
    ([pool("n1-standard-8", cat.T4, 1)] * 2 + [pool("n1-highmem-8")], {"mixed_precision": "on"},
     "training.mixed_precision is float16, which cannot work under ParameterServerStrategy"),
    ([pool("n1-standard-8", cat.T4, 1)] * 2 + [pool("n1-highmem-8")], {"xla": "on"},
     "training.xla is on, but under ParameterServerStrategy the compiled step runs on the "
     "workers"),
    ([pool("n1-standard-8")] * 2, {"xla": "on"},
     "training.xla is on, but XLA has no collectives on CPUs"),
    ([pool("n1-standard-8", cat.T4, 1)] * 2, {"mixed_precision": "bfloat16"},
     "training.mixed_precision is bfloat16, but NVIDIA_TESLA_T4 (compute capability 7.5) has "
     "no bfloat16"),
    ([pool("n1-standard-8"), pool("n1-standard-8"), pool("n1-highcpu-16", image=RS_IMAGE)], {},
     "runs Vertex AI's Reduction Server, which reduces NCCL all-reduces between GPU training "
     "machines (Vertex AI docs: Reduction Server prerequisites); this cluster has no GPUs"),
    ([pool("n1-standard-8", cat.T4, 4), pool("n1-standard-8", cat.T4, 1)], {},
     "worker_pool_specs[0] (chief) has 4 x NVIDIA_TESLA_T4; worker_pool_specs[1] (workers) has "
     "1 x NVIDIA_TESLA_T4: MultiWorkerMirroredStrategy"),
])
def test_what_cannot_work_is_refused_at_load(pools, options, message):
    result = check_pools(pools, training=TrainingOptions(**options))
    assert not result.ok and any(message in e for e in result.errors), result.errors
    assert result.plan is None


def test_the_reduction_server_reduces_through_nccl_and_is_sized_by_bandwidth(monkeypatch):
    # Vertex AI's docs' example: 5 n1-highmem-96 with 8 V100s (100 Gbps each) and 16
    # n1-highcpu-16 reducers (32 Gbps each): 512 Gbps >= 500.
    v100 = pool("n1-highmem-96", cat.V100, 8)
    pools = [v100, {**v100, "replica_count": 4},
             pool("n1-highcpu-16", replicas=16, image=RS_IMAGE)]
    monkeypatch.setattr(images, "reduction_server_plugin", lambda root=None: "1.2.3")
    result = check_pools(pools, region="us-central1")
    # Enough reducers: the only advice is which plugin the image holds.
    assert result.ok and [w for w in result.warnings if "NCCL plugin" not in w] == [], \
        (result.errors, result.warnings)
    assert (result.plan.strategy, result.plan.all_reduce, result.plan.reduction_server) == \
        ("multi_worker_mirrored", "nccl", True)
    assert "Reduction Server" in result.plan.reasons["all_reduce"]
    assert "through the Reduction Server" in result.plan.summary()
    # Too few reducers: advice with the numbers.
    pools[2] = pool("n1-highcpu-16", replicas=8, image=RS_IMAGE)
    # 8 x 32 Gbps = 256 against 500: 16 reducers (512 Gbps) are the fewest that carry it.
    (advice,) = check_reduction_server(parse_pools(pools))
    assert not missing(advice, "worker_pool_specs[2]", "8 x n1-highcpu-16", "256 Gbps",
                       "500 Gbps", "16 x n1-highcpu-16")
    # The docs' other example: 8 a2-megagpu-16g workers need 25 n1-highcpu-16 reducers.
    mega = pool("a2-megagpu-16g", cat.A100, 16)
    advice = check_reduction_server(parse_pools([mega, {**mega, "replica_count": 7},
                                     pool("n1-highcpu-16", replicas=20, image=RS_IMAGE)]))
    assert "use 25 x n1-highcpu-16" in advice[0]


def test_a_reduction_server_pool_says_which_plugin_the_gpu_image_gets(monkeypatch):
    """Reduction Server was refused while the apt lock pinned nothing (Google's apt
    repository is out of reach where `make lock` ran); the image build now resolves the
    plugin itself, and stage 1 says how."""
    v100 = pool("n1-highmem-96", cat.V100, 8)
    pools = [v100, {**v100, "replica_count": 4},
             pool("n1-highcpu-16", replicas=16, image=RS_IMAGE)]
    monkeypatch.setattr(images, "reduction_server_plugin", lambda root=None: None)
    result = check_pools(pools, region="us-central1")
    assert result.ok and (result.plan.all_reduce, result.plan.reduction_server) == \
        ("nccl", True)
    (said,) = [w for w in result.warnings if "NCCL plugin" in w]
    assert said.startswith(
        "worker_pool_specs[2] (Reduction Server): the training machines' NCCL plugin is the "
        "newest google-reduction-server in https://packages.cloud.google.com/apt "
        "google-fast-socket main, resolved when the GPU image is built "
        "(requirements/gpu-apt.lock pins nothing): its InRelease checked with gpgv against "
        "the pinned key A362B822F6DEDC652817EA46B53DC80D13EDEF05 alone")
    monkeypatch.setattr(images, "reduction_server_plugin", lambda root=None: "1.2.3")
    (said,) = [w for w in check_pools(pools, region="us-central1").warnings
               if "NCCL plugin" in w]
    assert said.endswith("google-reduction-server=1.2.3 (pinned by requirements/gpu-apt.lock)")


def test_a_replica_stops_when_nccl_cannot_open_the_reduction_server_plugin():
    from trainer.run.gpu_check import (
        MissingNcclPluginError,
        nccl_net_plugin,
        require_reduction_server_plugin,
    )

    assert nccl_net_plugin({}) == "libnccl-net.so"
    assert nccl_net_plugin({"NCCL_NET_PLUGIN": "gcp"}) == "libnccl-net-gcp.so"
    # NCCL_NET_PLUGIN may name a library: any that loads here stands in for the plugin.
    assert require_reduction_server_plugin({"NCCL_NET_PLUGIN": "libc.so.6"}) == "libc.so.6"
    with pytest.raises(MissingNcclPluginError) as refused:
        require_reduction_server_plugin({})
    assert not missing(str(refused.value), "libnccl-net.so", "cannot open shared object file")


def test_the_replica_names_the_plugin_package_the_image_recorded(tmp_path, monkeypatch):
    from trainer.run import gpu_check

    record = tmp_path / "gpu-apt.lock"
    record.write_text("# What this image's apt step installed\nsource https://x s main\n"
                      "key https://x/k.gpg ABCD\npackage google-reduction-server 1.0.10 "
                      "pool/g_1.0.10_amd64.deb sha256:" + "ab" * 32 + "\n")
    monkeypatch.setattr(gpu_check, "APT_RECORD", str(record))
    assert gpu_check.require_reduction_server_plugin({"NCCL_NET_PLUGIN": "libc.so.6"}) == \
        "libc.so.6, from google-reduction-server=1.0.10 (sha256:" + "ab" * 32 + ")"
    assert gpu_check.installed_packages(str(tmp_path / "none")) == []


def test_a_training_replica_given_a_reduction_server_plan_stops_without_the_plugin(
        tmp_path, monkeypatch):
    monkeypatch.setattr(images, "reduction_server_plugin", lambda root=None: "1.2.3")
    v100 = pool("n1-standard-8", cat.V100, 1)
    plan = check_pools([v100, v100, pool("n1-highcpu-16", replicas=2, image=RS_IMAGE)]).plan
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps({
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
        "task": {"type": "worker", "index": 0}})}
    env.pop("NCCL_NET_PLUGIN", None)
    result = subprocess.run([sys.executable, "-m", "trainer.task", "--job-dir",
                             str(tmp_path / "j"), "--data-dir", str(tmp_path),
                             "--training-plan", plan.to_json()],
                            cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert not missing(result.stderr, "trainer: ", "worker_pool_specs[2]", "libnccl-net.so")
    assert not (tmp_path / "j").exists()  # stopped before any work


def test_a_plan_travels_as_json_and_is_checked_when_read():
    plan = plan_for_pools(parse_pools([pool("a2-highgpu-2g", cat.A100, 2)] * 2))
    assert TrainingPlan.from_json(plan.to_json()) == plan
    with pytest.raises(PlanError, match="all_reduce is 'mpi'; expected one of nccl, ring, none"):
        TrainingPlan.from_dict({**plan.to_dict(), "all_reduce": "mpi"})
    with pytest.raises(PlanError, match="--training-plan is not JSON"):
        TrainingPlan.from_json("{")


def _args(*extra):
    from trainer.run.arguments import parse_args

    return parse_args(["--job-dir", "j", "--data-dir", "d", *extra])


def test_the_trainer_applies_the_plan_given_and_refuses_one_for_another_cluster():
    from trainer.run.replica import training_plan

    mwms = cluster_from_env({"TF_CONFIG": json.dumps({
        "cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "chief"}})})
    given = plan_for_pools(parse_pools([pool("n1-standard-8", cat.V100, 1)] * 2))
    # The chief sees no GPU here: the plan given is applied all the same, not re-decided.
    applied = training_plan(_args("--training-plan", given.to_json()), mwms, 0, None)
    assert applied == given and applied.mixed_precision == "float16"
    ps = plan_for_pools(parse_pools([pool("n1-standard-8", cat.T4, 1)] * 2
                                    + [pool("n1-highmem-8")]))
    with pytest.raises(ClusterConfigError, match="--training-plan is for parameter_server, "
                                                 "but TF_CONFIG's cluster"):
        training_plan(_args("--training-plan", ps.to_json()), mwms, 0, None)
    # Without a plan, the trainer makes one by the same rules from what it sees.
    own = training_plan(_args(), mwms, 2, (8, 0))
    assert (own.all_reduce, own.mixed_precision, own.xla) == ("nccl", "bfloat16", False)


@pytest.mark.parametrize("pools,hint", [
    ([pool("n1-standard-8", cat.V100, 1)] * 2, "nccl"),
    ([pool("n1-standard-8")] * 2, "ring"),
])
@pytest.mark.slow
def test_the_strategy_all_reduces_as_the_plan_says(pools, hint):
    """The trainer's MultiWorkerMirroredStrategy on a real two-process cluster traces its
    gradient all-reduce with the plan's hint: `nccl` on GPU machines (TensorFlow's
    collective resolver then runs NCCL; the default AUTO would trace `auto` and run its
    ring over gRPC), `ring` on CPUs. Traced, not run, so no GPU is needed."""
    from components.training.local_cluster import free_ports

    plan = plan_for_pools(parse_pools(pools))
    ports = free_ports(2)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    procs = []
    try:
        for task in ("chief", "worker"):
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": task, "index": 0}})}
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.support.strategy_probe", plan.to_json()], cwd=ROOT,
                env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-2000:]
            assert json.loads(out.strip().splitlines()[-1]) == {
                "strategy": "CollectiveAllReduceStrategy",
                "hints": [["CollectiveReduceV2", hint]]}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("flags,message", [
    (["--parameter-servers", "1", "--xla", "on"],
     "training.xla is on, but under ParameterServerStrategy"),
    (["--parameter-servers", "1", "--mixed-precision", "on"],
     "training.mixed_precision is float16, which cannot work under ParameterServerStrategy"),
    (["--training-machines", "2", "--xla", "on"],
     "training.xla is on, but XLA has no collectives on CPUs"),
])
def test_local_clusters_refuse_what_their_cpus_cannot_run_before_any_work(tmp_path, flags,
                                                                         message):
    result = subprocess.run([str(BIN), "run", "--local", *flags], cwd=tmp_path, text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: this local run (" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing prepared, nothing written


@pytest.mark.slow
def test_a_trainer_started_by_hand_refuses_xla_under_parameter_servers(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps({
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                    "ps": ["localhost:3"]}, "task": {"type": "chief", "index": 0}})}
    result = subprocess.run([sys.executable, "-m", "trainer.task", "--job-dir",
                             str(tmp_path / "j"), "--data-dir", str(tmp_path), "--xla", "on"],
                            cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert result.returncode == 2
    assert "trainer: training.xla is on, but under ParameterServerStrategy" in result.stderr
    assert "Traceback" not in result.stderr


def test_training_machines_that_differ_only_in_gpu_type_train_as_the_weakest_card():
    """MultiWorkerMirroredStrategy needs the same number of devices on every worker, not
    the same type (collective_all_reduce_strategy.py): a T4 chief beside V100 workers is
    accepted with a warning naming the slower card, and the plan is what both can do."""
    pools = [pool("n1-standard-8", cat.T4, 1), pool("n1-standard-8", cat.V100, 1)]
    result = check_pools(pools, region="us-central1")
    assert result.ok, result.errors
    (warning,) = [w for w in result.warnings if "different GPU types" in w]
    assert "every step waits for the slower NVIDIA_TESLA_T4 (65 against 125 peak TFLOPS" \
        in warning
    plan = result.plan
    assert (plan.accelerator, plan.mixed_precision, plan.xla) == (
        "NVIDIA_TESLA_T4+NVIDIA_TESLA_V100", "float16", False)
    # With an A100 beside the T4 the plan follows the T4: no bfloat16.
    mixed = [pool("a2-highgpu-1g", cat.A100, 1), pool("n1-standard-8", cat.T4, 1, replicas=2)]
    plan = plan_for_pools(parse_pools(mixed))
    assert (plan.accelerator, plan.mixed_precision) == ("NVIDIA_TESLA_T4+NVIDIA_TESLA_A100",
                                                        "float16")
    assert plan.reasons["mixed_precision"].startswith(
        "not measured on NVIDIA_TESLA_T4: NVIDIA_TESLA_T4 (compute capability 7.5)")
    with pytest.raises(PlanError, match=r"bfloat16, but NVIDIA_TESLA_T4 \(compute capability "
                                        r"7\.5\) has no bfloat16"):
        plan_for_pools(parse_pools(mixed), mixed_precision="bfloat16")
    # A different number of GPUs per training machine stays refused.
    with pytest.raises(PlanError, match="needs the same number of GPUs"):
        plan_for_pools(parse_pools([pool("n1-standard-8", cat.T4, 1),
                                    pool("n1-standard-16", cat.T4, 2)]))
    # Under parameter servers only the workers train: the chief's GPU does not count.
    ps = [pool("n1-standard-8", cat.T4, 1), pool("n1-standard-8", cat.V100, 1),
          pool("n1-highmem-8")]
    assert plan_for_pools(parse_pools(ps)).accelerator == cat.V100


@pytest.mark.parametrize("host", ["us-docker.pkg.dev", "europe-docker.pkg.dev",
                                  "asia-docker.pkg.dev"])
def test_the_reduction_server_is_recognised_under_any_artifact_registry_host(host):
    pools = [pool("a2-highgpu-8g", cat.A100, 8), pool("a2-highgpu-8g", cat.A100, 8, 3),
             pool("n1-highcpu-16", replicas=8, image=f"{host}/vertex-ai-restricted/training/"
                                                      "reductionserver:latest")]
    plan = plan_for_pools(parse_pools(pools))
    # NCCL through the reducers, not parameter servers (which would turn off mixed
    # precision and XLA and replace the reducer image by the trainer).
    assert (plan.strategy, plan.all_reduce, plan.reduction_server, plan.mixed_precision,
            plan.xla) == ("multi_worker_mirrored", "nccl", True, "bfloat16", False)
    # A look-alike elsewhere is not Vertex AI's image.
    pools[2]["container_spec"]["image_uri"] = \
        "europe-docker.pkg.dev/my-proj/training/reductionserver:latest"
    assert plan_for_pools(parse_pools(pools)).strategy == "parameter_server"
