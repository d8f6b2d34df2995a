"""Runs a CreatePipelineJobRequest the way Vertex AI Pipelines would, on this machine.

Every task comes from the request's compiled spec, never from Python function references:

- parameters are the request's `runtime_config.parameter_values` (protobuf Values: every
  number a double), task outputs and constants, passed to each task in an executor input
  built as the `ExecutorInput` proto and rendered the way Vertex AI's Go backend renders
  protobuf JSON (integral numbers without a fraction);
- artifacts get `gs://` URIs under the job's directory of the pipeline root; the task's
  processes see them at `/gcs/...` (the stand-in mount);
- containers run their command and arguments from the spec, placeholders resolved with
  KFP's own resolver: KFP's executor for the lightweight components, Google's own
  launchers for the CustomJob and the model upload (against the fake APIs);
- importers and conditions (`triggerPolicy`) as the spec says; a failed task fails its
  DAG and the run, after the exit handler's task (`ALL_UPSTREAM_TASKS_COMPLETED`, with a
  `PipelineTaskFinalStatus` input) has run;
- every task's container gets the run's labels in `VERTEX_AI_PIPELINES_RUN_LABELS`, as
  Vertex AI Pipelines sets them (the run's billing ID among them; gcpc's
  `gcp_labels_util` reads them), and `rerun` starts a task's container again as a retry
  in a new pod would: the same executor input, none of the earlier pod's local files;
- gcpc's email notification is sent by the service itself (its container would raise
  NotImplementedError; "This component works only on Vertex Pipelines"): recorded in
  `notifications`, and failed unless its status is an exit task's (`taskFinalStatus`);
- `kill_when` kills a task's container once a condition holds (a pod evicted, or a run
  cancelled, in the middle of its work: nothing of the step's own runs after it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from kfp.local import placeholder_utils
from kfp.pipeline_spec import pipeline_spec_pb2

from tests.support.vertex_emulator.mount import StandInMount


class TaskFailed(RuntimeError):
    """A task of the emulated run exited with an error."""


class RequestRefused(RuntimeError):
    """The CreatePipelineJobRequest is one Vertex AI would refuse (400 INVALID_ARGUMENT)."""


@dataclasses.dataclass
class Task:
    """What a task of the run did."""

    name: str
    display_name: str
    state: str  # SUCCEEDED, FAILED or SKIPPED
    error: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    executor_input: dict[str, Any] | None = None
    log: Path | None = None
    command: list[str] | None = None
    env: dict[str, str] | None = None
    definition: dict[str, Any] | None = None
    started: str = ""  # a container task's start and end (RFC 3339), as GetPipelineJob says
    ended: str = ""


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def protojson(value: Any) -> Any:
    """`value` as Vertex AI's backend prints protobuf Values: Go's protojson writes an
    integral double (a Struct's 1.0) as `1`, where Python's json would write `1.0`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: protojson(v) for k, v in value.items()}
    if isinstance(value, list):
        return [protojson(v) for v in value]
    return value


def _typed(value: str, kind: str) -> Any:
    if kind == "STRING":
        return value
    parsed = json.loads(value)
    return {"NUMBER_INTEGER": int, "NUMBER_DOUBLE": float}.get(kind, lambda v: v)(parsed)


def evaluate_condition(condition: str, parameters: dict[str, Any]) -> bool:
    """A trigger policy's CEL condition over the task's input parameters."""
    def literal(match: re.Match) -> str:
        return json.dumps(parameters[match.group(1)])

    expression = re.sub(r"inputs\.parameter_values\['([^']+)'\]", literal, condition)
    expression = expression.replace("&&", " and ").replace("||", " or ")
    expression = re.sub(r"!\s*\(", " not (", expression)
    return bool(eval(expression, {"__builtins__": {}},  # noqa: S307 - a spec we compiled
                     {"true": True, "false": False, "null": None}))


class EmulatedPipelines:
    """The emulated Vertex AI Pipelines service.

    Args:
        work_dir: Where task logs, executor inputs and outputs go.
        mount: The stand-in `/gcs/` mount.
        environment: Environment of every task process (the fake APIs, the emulator).
        timeout: Longest a task may take, in seconds.
        image_problem: Why an executor's image would be refused or not pulled, or None
            (`FakeGoogleApis.image_problem`); images are not checked without it.
        kill_when: Task name or display name -> a condition; the task's container is
            killed (SIGKILL) as soon as it holds.
        published: Where the run puts itself under its resource name once it starts, for
            the fake APIs' GetPipelineJob (`FakeGoogleApis.pipeline_jobs`).
        metadata: The fake's Vertex ML Metadata (`FakeGoogleApis.metadata`): the run's
            `system.PipelineRun` context is made there when it starts, and GetPipelineJob
            names it (`jobDetail.pipelineRunContext`), as Vertex AI Pipelines does.
    """

    def __init__(self, work_dir: Path, mount: StandInMount, environment: dict[str, str],
                 timeout: float = 900,
                 image_problem: Callable[[str], str | None] | None = None,
                 kill_when: dict[str, Callable[[], bool]] | None = None,
                 published: dict[str, EmulatedPipelines] | None = None,
                 metadata: Any = None):
        self.work_dir = work_dir
        self.metadata = metadata
        self.run_context = ""
        self.published = published
        self.running: tuple[str, str] | None = None  # (the container task, its start)
        self.kill_when = kill_when or {}
        self.notifications: list[dict[str, Any]] = []
        self.mount = mount
        self.environment = environment
        self.timeout = timeout
        self.image_problem = image_problem
        self.tasks: dict[str, Task] = {}

    def run(self, request: Any) -> dict[str, Task]:
        """Runs the request's pipeline job; returns its tasks (raises TaskFailed)."""
        from google.cloud import aiplatform_v1

        job = aiplatform_v1.PipelineJob.to_dict(request.pipeline_job)
        self.spec = job["pipeline_spec"]
        for label, executor in self.spec["deploymentSpec"]["executors"].items():
            image = executor.get("container", {}).get("image", "")
            problem = image and self.image_problem and self.image_problem(image)
            if problem:  # Vertex AI refuses the request before any task runs
                raise RequestRefused(f"400 INVALID_ARGUMENT: {problem} ({label})")
        runtime = job["runtime_config"]
        self.job_id = request.pipeline_job_id
        self.resource_name = f"{request.parent}/pipelineJobs/{self.job_id}"
        self.created = _now()
        if self.published is not None:
            self.published[self.resource_name] = self
        if self.metadata is not None:
            self.run_context = self.metadata.pipeline_run_context(
                f"{request.parent}/metadataStores/default", self.job_id)
        # Values Vertex AI substitutes for its runtime placeholders in parameter defaults.
        self.runtime_values = {
            "{{$.pipeline_google_cloud_project_id}}": request.parent.split("/")[1],
            "{{$.pipeline_persistent_resource_id}}": "",  # the run uses none
        }
        # ... and in task inputs (KFP's executor resolves the job's name and ID itself).
        self.input_values = {"{{$.pipeline_job_resource_name}}": self.resource_name}
        self.job_root = f"{runtime['gcs_output_directory'].rstrip('/')}/{self.job_id}"
        # Vertex AI Pipelines' labels of the run (the billing ID is a number of its own).
        self.run_labels = {"vertex-ai-pipelines-run-billing-id": str(
            int.from_bytes(self.job_id.encode()[-6:], "big") % 10**12)}
        given = runtime.get("parameter_values", {})
        root = self.spec["root"]
        parameters = {name: given.get(name, definition.get("defaultValue"))
                      for name, definition in root["inputDefinitions"]["parameters"].items()}
        failed = self._dag(root, parameters, {})
        if failed:
            raise TaskFailed(failed)
        return self.tasks

    # --- DAGs ----------------------------------------------------------------------------

    def _dag(self, component: dict[str, Any], parameters: dict[str, Any],
             artifacts: dict[str, Any]) -> str:
        """Runs a DAG's tasks in order; returns the first failure's message ("" if none)."""
        tasks = component["dag"]["tasks"]
        outputs: dict[str, Task] = {}
        failure = ""
        for name in _in_order(tasks):
            task = tasks[name]
            # An exit handler's task runs once its upstream tasks are done, whatever their
            # outcome; every other task only after they succeeded.
            whatever = task.get("triggerPolicy", {}).get("strategy") == \
                "ALL_UPSTREAM_TASKS_COMPLETED"
            if not whatever and any(outputs[d].state != "SUCCEEDED"
                                    for d in task.get("dependentTasks", [])):
                outputs[name] = self._record(name, task, "SKIPPED")
                continue
            params, arts = self._inputs(task, parameters, artifacts, outputs)
            condition = task.get("triggerPolicy", {}).get("condition")
            if condition and not evaluate_condition(condition, params):
                outputs[name] = self._record(name, task, "SKIPPED")
                continue
            definition = self.spec["components"][task["componentRef"]["name"]]
            try:
                if "dag" in definition:
                    inner = self._dag(definition, params, arts)
                    if inner:
                        raise TaskFailed(inner)
                    outputs[name] = self._record(name, task, "SUCCEEDED")
                    continue
                executor = self.spec["deploymentSpec"]["executors"][definition["executorLabel"]]
                if "importer" in executor:
                    outputs[name] = self._importer(name, task, executor["importer"], params)
                else:
                    outputs[name] = self._container(name, task, definition,
                                                    executor["container"], params, arts)
            except TaskFailed as exc:
                ran = self.tasks.get(name)  # a container's times, as it recorded them
                outputs[name] = self._record(name, task, "FAILED", error=str(exc),
                                             started=ran.started if ran else "",
                                             ended=ran.ended if ran else "")
                failure = failure or str(exc)
        return failure

    def _record(self, name: str, task: dict[str, Any], state: str, **fields: Any) -> Task:
        record = Task(name, task["taskInfo"]["name"], state, **fields)
        self.tasks[name] = record
        return record

    def _inputs(self, task: dict[str, Any], parameters: dict[str, Any],
                artifacts: dict[str, Any], outputs: dict[str, Task]):
        params = {}
        for name, source in task.get("inputs", {}).get("parameters", {}).items():
            if "componentInputParameter" in source:
                params[name] = parameters[source["componentInputParameter"]]
            elif "taskFinalStatus" in source:  # as Vertex AI passes PipelineTaskFinalStatus
                producer = outputs[source["taskFinalStatus"]["producerTask"]]
                status = {"state": producer.state,
                          "pipelineJobResourceName": self.resource_name,
                          "pipelineTaskName": producer.name}
                if producer.error:
                    status["error"] = {"code": 2, "message": producer.error[:500]}
                params[name] = status
            elif "taskOutputParameter" in source:
                producer = source["taskOutputParameter"]
                params[name] = outputs[producer["producerTask"]].parameters[
                    producer["outputParameterKey"]]
            else:
                constant = source["runtimeValue"]["constant"]
                params[name] = self.input_values.get(constant, constant) \
                    if isinstance(constant, str) else constant
        arts = {}
        for name, source in task.get("inputs", {}).get("artifacts", {}).items():
            if "componentInputArtifact" in source:
                arts[name] = artifacts[source["componentInputArtifact"]]
            else:
                producer = source["taskOutputArtifact"]
                arts[name] = outputs[producer["producerTask"]].artifacts[
                    producer["outputArtifactKey"]]
        return params, arts

    # --- Executors -------------------------------------------------------------------------

    def _importer(self, name: str, task: dict[str, Any], importer: dict[str, Any],
                  params: dict[str, Any]) -> Task:
        source = importer["artifactUri"]
        uri = params[source["runtimeParameter"]] if "runtimeParameter" in source \
            else source["constant"]

        def resolve(value: Any) -> Any:
            if isinstance(value, str):
                return re.sub(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}",
                              lambda m: str(params[m.group(1)]), value)
            if isinstance(value, dict):
                return {k: resolve(v) for k, v in value.items()}
            if isinstance(value, list):
                return [resolve(v) for v in value]
            return value

        artifact = {"name": name, "uri": uri, "type": importer["typeSchema"],
                    "metadata": resolve(importer.get("metadata", {}))}
        return self._record(name, task, "SUCCEEDED", artifacts={"artifact": artifact})

    def _container(self, name: str, task: dict[str, Any], definition: dict[str, Any],
                   container: dict[str, Any], params: dict[str, Any],
                   arts: dict[str, Any]) -> Task:
        local = self.work_dir / "tasks" / name
        local.mkdir(parents=True, exist_ok=True)
        task_root = f"{self.job_root}/{name}"
        inputs = definition.get("inputDefinitions", {})
        values = {}
        for key, spec in inputs.get("parameters", {}).items():
            if key in params:
                values[key] = params[key]
            elif "defaultValue" in spec:
                values[key] = self.runtime_values.get(spec["defaultValue"], spec["defaultValue"]) \
                    if isinstance(spec["defaultValue"], str) else spec["defaultValue"]
        outputs = definition.get("outputDefinitions", {})
        executor_input = {
            "inputs": {"parameterValues": values,
                       "artifacts": {k: {"artifacts": [v]} for k, v in arts.items()}},
            "outputs": {
                "parameters": {k: {"outputFile": str(local / "outputs" / k)}
                               for k in outputs.get("parameters", {})},
                "artifacts": {k: {"artifacts": [{
                    "name": k, "type": v["artifactType"], "uri": f"{task_root}/{k}",
                    "metadata": {}}]} for k, v in outputs.get("artifacts", {}).items()},
                "outputFile": str(local / "executor_output.json")}}
        # The executor input is an ExecutorInput proto: parameters become protobuf Values.
        proto = json_format.ParseDict(executor_input, pipeline_spec_pb2.ExecutorInput())
        executor_input = protojson(json_format.MessageToDict(proto))
        (local / "executor_input.json").write_text(json.dumps(executor_input, indent=1))
        command = placeholder_utils.replace_placeholders(
            full_command=[*container.get("command", []), *container.get("args", [])],
            executor_input_dict=executor_input, pipeline_resource_name=self.job_id,
            task_resource_name=name, pipeline_root=self.job_root,
            unique_pipeline_id=self.job_id)
        env = {**self.environment, **{e["name"]: e["value"] for e in container.get("env", [])},
               "VERTEX_AI_PIPELINES_RUN_LABELS": json.dumps(self.run_labels)}
        log = local / "log.txt"
        if any(EMAIL_EXECUTOR in part for part in command):
            return self._email(name, task, values, log)
        self.mount.pull()
        self.running = (name, _now())
        try:
            with open(log, "w") as out:
                code = self._run(command, env, local, out, self.kill_when.get(
                    name, self.kill_when.get(task["taskInfo"]["name"])))
        finally:
            times = {"started": self.running[1], "ended": _now()}
            self.running = None
        self.mount.push()
        if code != 0:
            self._record(name, task, "FAILED", log=log, **times)
            raise TaskFailed(f"task {name} ({task['taskInfo']['name']}) exited with {code}:\n"
                             + log.read_text()[-4000:])
        return self._record(name, task, "SUCCEEDED", executor_input=executor_input, log=log,
                            command=command, env=env, definition=definition, **times,
                            **self._outputs(definition, executor_input, local))

    def pipeline_job(self) -> dict[str, Any]:
        """The run as GetPipelineJob returns it while it runs (REST field names): each
        container task's details, with its start and end (none yet for the running one),
        the CustomJob it runs as (Vertex AI runs each step as one) and its output artifacts."""
        details = [{"taskName": name, "state": task.state, "startTime": task.started,
                    "endTime": task.ended, "executorDetail": {"containerDetail": {
                        "mainJob": f"{self.resource_name.split('/pipelineJobs/')[0]}"
                                   f"/customJobs/step-{number}"}},
                    "outputs": {key: {"artifacts": [{"uri": artifact.get("uri", ""),
                                                     "metadata": artifact.get("metadata", {})}]}
                                for key, artifact in task.artifacts.items()}}
                   for number, (name, task) in enumerate(self.tasks.items()) if task.started]
        if self.running is not None:
            details.append({"taskName": self.running[0], "state": "RUNNING",
                            "startTime": self.running[1], "executorDetail": {
                                "containerDetail": {}}})
        context = {"pipelineRunContext": self.metadata.resources[self.run_context]} \
            if self.run_context else {}
        return {"name": self.resource_name, "state": "PIPELINE_STATE_RUNNING",
                "createTime": self.created, "jobDetail": {"taskDetails": details, **context}}

    def step_job(self, name: str) -> dict[str, Any] | None:
        """The CustomJob a step ran as (GetCustomJob, REST field names) for the name
        `pipeline_job` gives it, None for another name. Its machine is e2-standard-4,
        Vertex AI Pipelines' default ("Specify the machine configuration for a pipeline
        step"), unless the step asks for more CPUs or memory: then, as read here, the
        smallest e2-standard machine that holds them."""
        prefix = f"{self.resource_name.split('/pipelineJobs/')[0]}/customJobs/step-"
        number = name.removeprefix(prefix)
        tasks = list(self.tasks.values())  # numbered as `pipeline_job` numbers them
        if not name.startswith(prefix) or not number.isdigit() or int(number) >= len(tasks):
            return None
        task = tasks[int(number)]
        resources = self.spec["deploymentSpec"]["executors"].get(
            (task.definition or {}).get("executorLabel", ""), {}).get(
            "container", {}).get("resources", {})
        cpus = float(resources.get("resourceCpuLimit") or resources.get("cpuLimit") or 4)
        memory = str(resources.get("resourceMemoryLimit") or "16G")
        gb = float(memory.rstrip("G")) if memory.endswith("G") else 16.0
        size = next(n for n in (4, 8, 16, 32) if n >= cpus and 4 * n >= gb)
        return {"name": name, "state": "JOB_STATE_SUCCEEDED" if task.ended else
                "JOB_STATE_RUNNING", "jobSpec": {"workerPoolSpecs": [{
                    "machineSpec": {"machineType": f"e2-standard-{size}"},
                    "replicaCount": "1"}]}}

    def _run(self, command: list[str], env: dict[str, str], cwd: Path, out: Any,
             condition: Callable[[], bool] | None) -> int | str:
        """A task's container to its end: its exit code, "timeout", or "killed" (once
        `condition` held)."""
        import time

        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        try:
            while process.poll() is None:
                if condition is not None and condition():
                    process.kill()
                    process.wait()
                    return "killed"
                if time.monotonic() > deadline:
                    return "timeout"
                time.sleep(0.1)
            return process.returncode
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    def _email(self, name: str, task: dict[str, Any], values: dict[str, Any],
               log: Path) -> Task:
        """Vertex AI's email notification: sent by the service, only as an exit task."""
        source = task.get("inputs", {}).get("parameters", {}).get(
            "pipeline_task_final_status", {})
        if "taskFinalStatus" not in source:
            log.write_text("The notification email component can only be used as an "
                           "ExitHandler's exit task.\n")
            raise TaskFailed(f"task {name}: {log.read_text()}")
        status = values["pipeline_task_final_status"]
        self.notifications.append({"recipients": list(values["recipients"]),
                                   "state": status["state"], "status": status})
        log.write_text(f"emailed {', '.join(values['recipients'])}: {status['state']}\n")
        return self._record(name, task, "SUCCEEDED", log=log)

    def rerun(self, name: str, *, artifacts_under: str = "",
              run_labels: dict[str, str] | None = None,
              parameters: dict[str, Any] | None = None) -> Task:
        """Starts a finished task's container again in a new pod (its local output files
        gone), as a retry or a resumed run would; returns what it did this time.

        Args:
            name: The task.
            artifacts_under: A new URI for the task's output artifacts (as another run's
                task would have: nothing is there yet); "" keeps the first run's.
            run_labels: Vertex AI Pipelines' run labels this time (another run's: its
                billing ID finds none of the first run's jobs); None keeps the first's.
            parameters: Input parameters to change (each replaced whole), as another run
                with another configuration would pass them.
        """
        import shutil

        task = self.tasks[name]
        local = task.log.parent
        shutil.rmtree(local / "outputs", ignore_errors=True)
        (local / "executor_output.json").unlink(missing_ok=True)
        log = local / "rerun-log.txt"
        executor_input, command, env = task.executor_input, task.command, task.env
        if artifacts_under or parameters:
            executor_input = json.loads(json.dumps(executor_input))
            executor_input["inputs"].setdefault("parameterValues", {}).update(parameters or {})
            for key, value in executor_input["outputs"].get("artifacts", {}).items():
                if artifacts_under:
                    value["artifacts"][0]["uri"] = f"{artifacts_under.rstrip('/')}/{key}"
            # The executor input is one argument of the command (KFP's `{{$}}`).
            command = [json.dumps(executor_input) if _parsed(part) == task.executor_input
                       else part for part in task.command]
        if run_labels is not None:
            env = {**env, "VERTEX_AI_PIPELINES_RUN_LABELS": json.dumps(run_labels)}
        self.mount.pull()
        with open(log, "w") as out:
            code = subprocess.run(command, env=env, cwd=local, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=self.timeout).returncode
        self.mount.push()
        if code != 0:
            raise TaskFailed(f"task {name} run again exited with {code}:\n"
                             + log.read_text()[-4000:])
        return dataclasses.replace(task, log=log, command=command, env=env, **self._outputs(
            task.definition, executor_input, local))

    @staticmethod
    def _outputs(definition: dict[str, Any], executor_input: dict[str, Any],
                 local: Path) -> dict[str, Any]:
        declared = definition.get("outputDefinitions", {})
        written: dict[str, Any] = {}
        path = local / "executor_output.json"
        if path.is_file():
            proto = json_format.Parse(path.read_text(), pipeline_spec_pb2.ExecutorOutput())
            written = json_format.MessageToDict(proto)
        parameters = dict(written.get("parameterValues", {}))
        for key, spec in declared.get("parameters", {}).items():
            file = local / "outputs" / key
            if key not in parameters and file.is_file():
                parameters[key] = _typed(file.read_text(), spec["parameterType"])
        artifacts = {}
        for key, value in executor_input["outputs"].get("artifacts", {}).items():
            artifact = dict(value["artifacts"][0])
            update = written.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
            artifact["uri"] = update.get("uri", artifact["uri"])
            artifact["metadata"] = {**artifact.get("metadata", {}), **update.get("metadata", {})}
            artifacts[key] = artifact
        return {"parameters": parameters, "artifacts": artifacts}


#: The module of gcpc's email notification's container (Vertex AI sends the email).
EMAIL_EXECUTOR = "google_cloud_pipeline_components.container.v1.vertex_notification_email"


def _parsed(text: str) -> Any:
    """`text` as JSON, or None when it is not."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _in_order(tasks: dict[str, Any]) -> list[str]:
    """Task names with every task after the tasks it depends on (name order otherwise)."""
    done: list[str] = []
    pending = sorted(tasks)
    while pending:
        ready = [n for n in pending if set(tasks[n].get("dependentTasks", [])) <= set(done)]
        if not ready:
            raise TaskFailed(f"the DAG has a cycle among {pending}")
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def environment(apis_url: str, mount: StandInMount, storage_host: str,
                project: str) -> dict[str, str]:
    """The environment of the emulated run's processes (see `site/sitecustomize.py`)."""
    import sys

    site = str(Path(__file__).resolve().parent / "site")
    return {**os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep),
            "EMULATED_GOOGLE_APIS": apis_url, "EMULATED_GCS_MOUNT": mount.prefix,
            "STORAGE_EMULATOR_HOST": storage_host, "GOOGLE_CLOUD_PROJECT": project,
            "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
