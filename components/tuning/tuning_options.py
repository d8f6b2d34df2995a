"""The study of a hyperparameter tuning run: declared once, used by the config file's
`tuning` section, the conversion of AI Platform's `trainingInput.hyperparameters`, the
pipelines' `tuning` parameter, the local study (Open Source Vizier) and the Vertex AI
HyperparameterTuningJob.

Names and values follow Vertex AI's `StudySpec` (docs: "Overview of hyperparameter
tuning", "Configure a hyperparameter tuning job"): a parameter is `DOUBLE`, `INTEGER`,
`DISCRETE` or `CATEGORICAL`, with a scale of `UNIT_LINEAR_SCALE`, `UNIT_LOG_SCALE` or
`UNIT_REVERSE_LOG_SCALE`; the algorithm is `ALGORITHM_UNSPECIFIED` (Vertex AI's Bayesian
optimization), `GRID_SEARCH` or `RANDOM_SEARCH`. Each parameter names a training option
(`trainer.run.training_options`), whose own rules check every value the study may try.
"""

from __future__ import annotations

import typing
from typing import Literal

import pydantic
from pydantic import Field

from trainer.common.schema import STRICT, OptionsError, short, validate
from trainer.run.training_options import REPORTED_METRICS, TrainingOptions

GOALS = ("MAXIMIZE", "MINIMIZE")
TYPES = ("DOUBLE", "INTEGER", "DISCRETE", "CATEGORICAL")
SCALES = ("UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
ALGORITHMS = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH")
#: Training options a study may not change: they decide where and how the run happens,
#: not how well the model learns.
NOT_TUNABLE = ("strategy", "user_code", "seed", "cache", "cache_budget_mb")


class Parameter(pydantic.BaseModel):
    """One searched training option."""

    model_config = STRICT

    name: str = Field(description="The training option (e.g. learning_rate, batch_size).")
    type: Literal[TYPES] = Field(description="DOUBLE or INTEGER (a range), DISCRETE "
                                             "(numbers) or CATEGORICAL (strings).")
    min_value: float | None = Field(None, description="DOUBLE, INTEGER: lowest value.")
    max_value: float | None = Field(None, description="DOUBLE, INTEGER: highest value.")
    scale: Literal[SCALES] = Field("UNIT_LINEAR_SCALE", description=(
        "How a range is searched; a log scale needs a positive minimum."))
    values: list[int | float | str] = Field(default_factory=list, description=(
        "DISCRETE: increasing numbers; CATEGORICAL: strings."))

    def problems(self) -> list[str]:
        field = TrainingOptions.model_fields.get(self.name)
        if field is None or self.name in NOT_TUNABLE:
            tunable = ", ".join(n for n in TrainingOptions.model_fields if n not in NOT_TUNABLE)
            return [f"name is {self.name!r}, which is not a training option a study can "
                    f"search; valid: {tunable}"]
        kind = field.annotation
        literal = typing.get_origin(kind) is Literal
        expected = {"DOUBLE": (float,), "INTEGER": (int,), "DISCRETE": (int, float)}
        if self.type in expected and kind not in expected[self.type]:
            return [f"type is {self.type}, but {self.name} is not a number option of that "
                    f"kind; use {_type_for(kind, literal)}"]
        if self.type == "CATEGORICAL" and not (kind is str or literal):
            return [f"type is CATEGORICAL, but {self.name} is not a string option; use "
                    f"{_type_for(kind, literal)}"]
        return self._range_problems() if self.type in ("DOUBLE", "INTEGER") \
            else self._value_problems()

    def _range_problems(self) -> list[str]:
        low, high = self.min_value, self.max_value
        if low is None or high is None or self.values:
            return [f"values is {short(self.values)} ({self.name}); a {self.type} parameter "
                    "takes min_value and max_value instead"]
        found = []
        if self.type == "INTEGER" and not (float(low).is_integer() and float(high).is_integer()):
            found.append(f"min_value is {low:g} and max_value {high:g} ({self.name}); an "
                         "INTEGER range has whole-number ends")
        if low >= high:
            found.append(f"min_value is {low:g} ({self.name}); expected a minimum below "
                         f"max_value ({high:g})")
        if self.scale != "UNIT_LINEAR_SCALE" and low <= 0:
            found.append(f"min_value is {low:g} ({self.name}); a {self.scale} needs a "
                         "positive minimum")
        found += self._option_problems([int(v) if self.type == "INTEGER" else v
                                        for v in (low, high)])
        return found

    def _value_problems(self) -> list[str]:
        if not self.values or self.min_value is not None or self.max_value is not None:
            return [f"values is {short(self.values)} ({self.name}); a {self.type} parameter "
                    "takes a list of values, without min_value and max_value"]
        if len(set(map(str, self.values))) != len(self.values):
            return [f"values is {short(self.values)} ({self.name}); a value repeats"]
        if self.type == "CATEGORICAL":
            if not all(isinstance(v, str) for v in self.values):
                return [f"values is {short(self.values)} ({self.name}); CATEGORICAL values "
                        "are strings"]
            return self._option_problems(list(self.values))
        if not all(isinstance(v, (int, float)) for v in self.values):
            return [f"values is {short(self.values)} ({self.name}); DISCRETE values are "
                    "numbers"]
        if list(self.values) != sorted(self.values):
            return [f"values is {short(self.values)} ({self.name}); Vertex AI needs "
                    "DISCRETE values in increasing order"]
        kind = TrainingOptions.model_fields[self.name].annotation
        return self._option_problems([int(v) if kind is int and float(v).is_integer() else v
                                      for v in self.values])

    def _option_problems(self, values: list) -> list[str]:
        """Each value the study may try must be valid for the option itself."""
        found = []
        for value in values:
            try:
                validate(TrainingOptions, {self.name: value})
            except OptionsError as exc:
                found += [p for p in exc.problems if p.startswith(f"{self.name} ")]
        return [f"{'values' if self.values else 'min_value/max_value'} would try a value "
                f"the training option refuses: training.{p}" for p in found]


def _type_for(kind: typing.Any, literal: bool) -> str:
    if kind is float:
        return "DOUBLE or DISCRETE"
    if kind is int:
        return "INTEGER or DISCRETE"
    if kind is str or literal:
        return "CATEGORICAL"
    return "another option (this one cannot be searched)"


#: A trial's measurement: its last report, or its best; Vertex AI's StudySpec names.
MEASUREMENTS = ("last", "best")
MEASUREMENT_SELECTION = {"last": "LAST_MEASUREMENT", "best": "BEST_MEASUREMENT"}


class TuningOptions(pydantic.BaseModel):
    """A study: which training options to search, how, and by which metric. No
    parameters: no tuning (the default)."""

    model_config = STRICT

    metric: Literal[REPORTED_METRICS] = Field("val_accuracy", description=(
        "The metric the trainer reports each epoch that trials are compared by."))
    goal: Literal[GOALS] = Field("MAXIMIZE", description="MAXIMIZE or MINIMIZE the metric.")
    parameters: list[Parameter] = Field(default_factory=list, description=(
        "The searched training options; empty: no tuning."))
    max_trials: int = Field(8, ge=1, le=1000, description="Trials in all.")
    parallel_trials: int = Field(1, ge=1, le=100, description=(
        "Trials at once (locally, also bounded by the machine's cores)."))
    max_failed_trials: int = Field(0, ge=0, le=1000, description=(
        "Failed trials that fail the study; 0: Vertex AI decides (locally, all may fail "
        "but one must succeed)."))
    algorithm: Literal[ALGORITHMS] = Field("ALGORITHM_UNSPECIFIED", description=(
        "ALGORITHM_UNSPECIFIED (Vertex AI: Bayesian optimization), GRID_SEARCH or "
        "RANDOM_SEARCH."))
    measurement: Literal[MEASUREMENTS] = Field("last", description=(
        "Which report of a trial is its measurement: last (its final epoch) or best (its "
        "best epoch); the same on Vertex AI (sent as study_spec_measurement_selection_type) "
        "and locally."))
    early_stopping: bool = Field(False, description=(
        "Stop a running trial whose best metric is worse than the median of the completed "
        "trials up to the same epoch (Vertex AI's median stopping rule); on this machine "
        "only (see vertex_problems)."))

    @property
    def enabled(self) -> bool:
        return bool(self.parameters)

    def problems(self) -> list[str]:
        found = [f"parameters[{i}].{p}" for i, parameter in enumerate(self.parameters)
                 for p in parameter.problems()]
        names = [p.name for p in self.parameters]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            found.append(f"parameters name {', '.join(repeated)} more than once")
        loss = self.metric.endswith("loss")
        if self.parameters and loss == (self.goal == "MAXIMIZE"):
            found.append(f"goal is {self.goal} for the metric {self.metric}; a "
                         f"{'loss' if loss else 'accuracy'} is "
                         f"{'minimized' if loss else 'maximized'}")
        if self.parallel_trials > self.max_trials:
            found.append(f"parallel_trials is {self.parallel_trials}, more than max_trials "
                         f"({self.max_trials})")
        if self.algorithm == "GRID_SEARCH" and any(p.type == "DOUBLE" for p in self.parameters):
            found.append("algorithm is GRID_SEARCH, which cannot search DOUBLE parameters "
                         "(Vertex AI); use DISCRETE values for them")
        return found


def vertex_problems(tuning: TuningOptions) -> list[str]:
    """What a study on Vertex AI cannot do: gcpc's `HyperparameterTuningJobRunOp`, which
    starts it, writes its StudySpec from metrics, parameters, algorithm and measurement
    selection only, so no stopping spec reaches Vertex AI."""
    if tuning.enabled and tuning.early_stopping:
        return ["tuning.early_stopping is true, which only a study on this machine can do: "
                "gcpc's HyperparameterTuningJobRunOp, which starts the study on Vertex AI, "
                "sends no stopping spec; set it to false for Vertex AI"]
    return []


def candidates(parameter: Parameter) -> list:
    """The values of a parameter that bound what a study may try: a range's ends, or
    every listed value (as the training option's type)."""
    kind = TrainingOptions.model_fields[parameter.name].annotation
    if parameter.type in ("DOUBLE", "INTEGER"):
        ends = [parameter.min_value, parameter.max_value]
        return [int(v) if parameter.type == "INTEGER" else v for v in ends if v is not None]
    return [int(v) if kind is int and isinstance(v, float) and v.is_integer() else v
            for v in parameter.values]


def conflicts(tuning: TuningOptions, training: TrainingOptions) -> list[str]:
    """A study's values that the rest of the training options refuse (rules between
    options, e.g. warmup_epochs below epochs), checked at load."""
    found = []
    base = training.model_dump(include=set(TrainingOptions.model_fields))
    for index, parameter in enumerate(tuning.parameters):
        if parameter.problems():
            continue  # reported on its own
        for value in candidates(parameter):
            try:
                validate(TrainingOptions, {**base, parameter.name: value})
            except OptionsError as exc:
                found += [f"tuning.parameters[{index}] ({parameter.name}) would try "
                          f"{short(value)}, which the training options refuse: training.{p}"
                          for p in exc.problems]
    return found
