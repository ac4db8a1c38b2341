"""The DataLoadingBenchmark spec, one pydantic model.

Its benchmark settings are the data-loading workload's own declarations
(:class:`~ckptbench.workload.contract.data.settings.DataSettings`, which it extends): the CRD field,
its bounds and its description come from the one place the rank's variable and the ``ckptbench
data`` option come from too. What only a cluster has (the pods and the run) is the
CheckpointBenchmark's too: :class:`~ckptbench.operator.spec.pods.PodSpec`, with the same checks and
the same admin's allow-lists.

Each rule that spans several fields is enforced twice, from one declaration: as CEL in the CRD and
as its Python twin here (:meth:`DataLoadingBenchmarkSpec.cross_field_problems`). :data:`RULES` holds
them: the settings' (``DATA_RULES``, which the rank's config runs too), then the CR's own
(:data:`~ckptbench.operator.data.rules.RULES_OF_THE_CR`).
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

from ckptbench.operator.data.names import KIND, PLURAL
from ckptbench.operator.data.rules import RULES_OF_THE_CR, memory_problem
from ckptbench.operator.spec.parse import parse_model
from ckptbench.operator.spec.pods import PodSpec, resources_field
from ckptbench.operator.spec.policy import Policy
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.settings import DATA_RULES, DataSettings
from ckptbench.workload.contract.rule import Rule

__all__ = ["KIND", "PLURAL", "RULES", "DataLoadingBenchmarkSpec", "parse_data_spec"]

# Every rule the CRD carries, in its order, each with its Python twin.
RULES: tuple[Rule[DataLoadingBenchmarkSpec], ...] = (*DATA_RULES, *RULES_OF_THE_CR)
_CRD_RULES: list[JsonValue] = [cast("JsonValue", rule.to_crd()) for rule in RULES]


class DataLoadingBenchmarkSpec(PodSpec, DataSettings):
    """A training data-loading benchmark (MLPerf Storage's procedure): worldSize pods each run
    acceleratorsPerRank emulated accelerators, each reading its share of a dataset the benchmark
    makes under dataPath through a PyTorch DataLoader and the reader library named by backend;
    samples per second and accelerator utilisation are measured."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # No coercion ("4" for 4, "yes" for true): accept exactly what the CRD schema accepts.
        strict=True,
        frozen=True,
        json_schema_extra={"x-kubernetes-validations": _CRD_RULES},
    )

    resources: dict[str, Any] | None = resources_field(
        "Compute resources of each rank's container (a Kubernetes ResourceRequirements: "
        "requests, limits). Without a memory limit the operator sets one from the rank's planned "
        "peak (every batch in flight, each worker's file, the workers themselves; "
        "docs/data-loading.md#memory); a given limit below that plan is refused."
    )

    def cross_field_problems(self) -> list[str]:
        # Each message starts with the field it is about, for the CEL rule and for this twin alike.
        broken = [rule.message for rule in RULES if not rule.check(self)]
        if not broken:
            problem = memory_problem(self, self)
            if problem is not None:
                broken.append(problem)
        return broken

    def to_data_config(self, run_id: str, master_addr: str) -> DataConfig:
        """The configuration every rank of this benchmark runs with (rank 0; pods set their own).

        Only the settings the spec sets are passed: the rest take the same declared defaults."""
        settings = self.model_dump(include=_SETTINGS, exclude_unset=True)
        return DataConfig(**settings, run_id=run_id, master_addr=master_addr)


_SETTINGS = set(DataSettings.model_fields)


def parse_data_spec(raw: object, policy: Policy | None = None) -> DataLoadingBenchmarkSpec:
    """Validate ``raw`` (the object's ``spec``) or raise
    :class:`~ckptbench.operator.spec.parse.SpecError` naming each bad field (``spec.<field>``);
    with ``policy``, the admin's allow-lists are checked too."""
    return parse_model(DataLoadingBenchmarkSpec, raw, policy)
