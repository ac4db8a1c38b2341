"""The CheckpointBenchmark spec, one pydantic model.

Its benchmark settings are the workload's own declarations
(:class:`~ckptbench.workload.contract.settings.BenchmarkSettings`, which it extends): the CRD
field, its bounds and its description come from the one place the rank's variable and the
``ckptbench run`` option come from too. The pods
(image, resources, volumes, scheduling) and the run (restarts, deadline), what only a cluster has,
are :class:`~ckptbench.operator.spec.pods.PodSpec`'s, shared with the DataLoadingBenchmark.

The CRD in ``crds/`` is generated from this model (``ckptbench crd``), so the descriptions here are
what ``kubectl explain`` shows. Each rule that spans several fields is enforced twice, from one
declaration: as CEL (``x-kubernetes-validations``, enforced by the API server) and as its Python
twin in :meth:`CheckpointBenchmarkSpec.cross_field_problems` (enforced by the operator and
``ckptbench render``, which see objects that never went through an API server). :data:`RULES`
holds them: the settings' (declared beside the settings, which the rank's config runs too), then
the CR's own (:data:`~ckptbench.operator.spec.rules.RULES_OF_THE_CR`).
"""

from __future__ import annotations

import json
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec.pods import PodSpec, resources_field
from ckptbench.operator.spec.rules import RULES_OF_THE_CR, memory_problem
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.data.settings import LoaderSettings
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.settings import SETTINGS_RULES, BenchmarkSettings

# Every rule the CRD carries, in its order, each with its Python twin.
RULES: tuple[Rule[CheckpointBenchmarkSpec], ...] = (*SETTINGS_RULES, *RULES_OF_THE_CR)
_CRD_RULES: list[JsonValue] = [cast("JsonValue", rule.to_crd()) for rule in RULES]


class LoaderSpec(LoaderSettings):
    """The loader's settings (``dataLoading``), as the CR spells them: camelCase, no coercion."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )


class CheckpointBenchmarkSpec(PodSpec, BenchmarkSettings):
    """A distributed PyTorch checkpoint (torch.distributed.checkpoint) save/load benchmark:
    worldSize pods each save and load their shard of a synthetic state_dict of paddingSize float32
    tensors of shape (layerSize, 1000), timed over sampleCount samples."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # No coercion ("4" for 4, "yes" for true): accept exactly what the CRD schema accepts.
        strict=True,
        frozen=True,
        json_schema_extra={"x-kubernetes-validations": _CRD_RULES},
    )

    # The loader's group, camelCase inside as outside; declared in BenchmarkSettings.
    data_loading: LoaderSpec | None = Field(
        None, description=BenchmarkSettings.model_fields["data_loading"].description
    )

    resources: dict[str, Any] | None = resources_field(
        "Compute resources of each rank's container (a Kubernetes "
        "ResourceRequirements: requests, limits). A rank holds one shard in memory (two with "
        "asyncSave, while DCP's staging copy is uploaded), plus about 300 MiB for the runtime and "
        "transfer buffers: request memory accordingly."
    )

    def cross_field_problems(self) -> list[str]:
        # Each message starts with the field it is about, for the CEL rule and for this twin alike.
        broken = [rule.message for rule in RULES if not rule.check(self)]
        if not broken:
            # Python only: the estimate needs the model's arithmetic, which CEL cannot do.
            memory = memory_problem(self)
            if memory is not None:
                broken.append(memory)
        return broken

    # -- use --------------------------------------------------------------------------------------

    def to_workload_config(self, run_id: str, master_addr: str) -> WorkloadConfig:
        """The configuration every rank of this benchmark runs with (rank 0; pods set their own).

        Only the settings the spec sets are passed: the rest take the same declared defaults, and
        an unset layerSize must stay unset beside a model (they are exclusive).
        """
        settings = self.model_dump(include=_SETTINGS, exclude_unset=True)
        return WorkloadConfig(**settings, run_id=run_id, master_addr=master_addr)


_SETTINGS = set(BenchmarkSettings.model_fields)


def canonical_json(spec: BaseModel) -> str:
    """The spec as one canonical JSON text: what is hashed, recorded on the JobSet and compared."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True)
