"""What a cluster admin allows benchmarks, beyond the restricted defaults every spec obeys.

Whoever may create a CheckpointBenchmark gets pods made by the operator's service account. So
the image the pods run, the service account they run as (and, through Workload Identity or IRSA,
its cloud account), the Secrets they mount, the taints they tolerate and their priority are the
admin's decision, made in the chart's values and handed to the operator as flags.

The same rules run three times: here, when the spec model is validated with the policy as
validation context (``parse_spec(raw, policy)``: the operator and ``ckptbench render``); in the
chart's ValidatingAdmissionPolicy (CEL over the same values, at the API server:
``charts/ckptbench/templates/admission-policy.yaml``); and by the operator once more right
before it creates the JobSet (``render_jobset``). Each refusal names the field and the list.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

# A digest pin: the content is fixed whatever the tag says.
DIGEST = r"@sha256:[a-f0-9]{64}"
# An allowed registry prefix: a registry host (optional port) and path components, ending in '/',
# so that "registry.example/team/" cannot admit "registry.example/team-evil/x" and a host cannot
# admit another host it prefixes ("registry.example" and "registry.example.attacker.io").
IMAGE_PREFIX_PATTERN = r"^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*/$"
# An empty, '.' or '..' path step: what a prefix admits must stay under it.
_NOT_A_PATH = r"//|(^|/)[.][.]?(/|$)"
# Where the policy is found in pydantic's validation context.
CONTEXT_KEY = "policy"


class Spec(Protocol):
    """What the policy reads of a spec (the model runs it, so this module does not import it)."""

    @property
    def image(self) -> str | None: ...
    @property
    def service_account_name(self) -> str | None: ...
    @property
    def priority_class_name(self) -> str | None: ...
    @property
    def tolerations(self) -> list[dict[str, Any]]: ...
    @property
    def volumes(self) -> list[dict[str, Any]]: ...
    @property
    def s3_credentials_secret(self) -> str | None: ...


@dataclass(frozen=True)
class Policy:
    """The admin's allow-lists (chart values ``workload.*``; operator flags ``--allow-*``).

    ``image`` is the workload image the chart names (the operator's default image): a spec may
    name it, or its repository pinned by digest; other images only under ``image_prefixes``.
    Everything else defaults to nothing allowed.
    """

    image: str | None = None
    image_prefixes: frozenset[str] = frozenset()
    service_accounts: frozenset[str] = frozenset()
    secrets: frozenset[str] = frozenset()
    toleration_keys: frozenset[str] = frozenset()
    priority_class_names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for prefix in self.image_prefixes:
            if not re.fullmatch(IMAGE_PREFIX_PATTERN, prefix):
                raise ValueError(
                    f"image prefix {prefix!r}: must be a registry host and path ending in '/' "
                    "(e.g. us-docker.pkg.dev/my-project/ckptbench/)"
                )

    def allows_image(self, image: str) -> bool:
        under_a_prefix = any(image.startswith(p) for p in self.image_prefixes)
        if under_a_prefix and not re.search(_NOT_A_PATH, image):
            return True
        if self.image is None:
            return False
        if image == self.image:
            return True
        # The chart's image pinned by digest: repository@sha256:..., with or without its tag.
        repository = image_repository(self.image)
        return any(
            re.fullmatch(re.escape(named) + DIGEST, image) for named in (repository, self.image)
        )

    def allowed_images(self) -> str:
        said = []
        if self.image is not None:
            said.append(
                f"{self.image}, the chart's workload image, or "
                f"{image_repository(self.image)}@sha256:<digest>"
            )
        said.append(f"images under {_listed(self.image_prefixes)}")
        return "; ".join(said)

    def problems(self, spec: Spec) -> list[str]:
        """Why this policy refuses ``spec``, one message per field; empty when it admits it."""
        found = []
        if spec.image is not None and not self.allows_image(spec.image):
            found.append(
                _refused(
                    "spec.image",
                    spec.image,
                    self.allowed_images(),
                    "workload.image, workload.allowedImagePrefixes",
                )
            )
        account = spec.service_account_name
        if account is not None and account not in self.service_accounts:
            found.append(
                _refused(
                    "spec.serviceAccountName",
                    account,
                    _listed(self.service_accounts),
                    "workloadServiceAccount.name, workload.allowedServiceAccountNames",
                )
            )
        references = secret_references(spec.volumes)
        if spec.s3_credentials_secret is not None:
            # Its keys become the pods' AWS credentials: as much a Secret read as a mount.
            references.append(("spec.s3CredentialsSecret", spec.s3_credentials_secret))
        for where, name in references:
            # A volume source is a free-form object: its name may be no string (nor hashable).
            if not isinstance(name, str) or name not in self.secrets:
                found.append(
                    _refused(where, name, _listed(self.secrets), "workload.allowedSecretNames")
                )
        for index, toleration in enumerate(spec.tolerations):
            key = toleration.get("key")
            if key not in self.toleration_keys:
                found.append(
                    _refused(
                        f"spec.tolerations[{index}].key",
                        key,
                        _listed(self.toleration_keys),
                        "workload.allowedTolerationKeys",
                    )
                )
        name = spec.priority_class_name
        if name is not None and name not in self.priority_class_names:
            found.append(
                _refused(
                    "spec.priorityClassName",
                    name,
                    _listed(self.priority_class_names),
                    "workload.allowedPriorityClassNames",
                )
            )
        return found


def image_repository(image: str) -> str:
    """``image`` without its tag and digest (a registry port's ':' is not a tag's)."""
    name = image.split("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def secret_references(volumes: list[dict[str, Any]]) -> list[tuple[str, object]]:
    """Every Secret the volumes name, with the field naming it: a secret volume's secretName
    (none at all is refused too: it would fail at pod creation), and a CSI volume's
    nodePublishSecretRef (handed to the driver, which may act on it for the pod)."""
    found: list[tuple[str, object]] = []
    for index, volume in enumerate(volumes):
        secret = volume.get("secret")
        if isinstance(secret, dict):
            found.append((f"spec.volumes[{index}].secret.secretName", secret.get("secretName")))
        csi = volume.get("csi")
        if isinstance(csi, dict) and "nodePublishSecretRef" in csi:
            ref = csi.get("nodePublishSecretRef")
            name = ref.get("name") if isinstance(ref, dict) else None
            found.append((f"spec.volumes[{index}].csi.nodePublishSecretRef.name", name))
    return found


def _refused(field: str, value: object, allowed: str, values: str) -> str:
    return (
        f"{field}: {value!r} is not allowed by the operator's policy (allowed: {allowed}; "
        f"chart values {values})"
    )


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _image_prefix(text: str) -> str:
    if not re.fullmatch(IMAGE_PREFIX_PATTERN, text):
        raise argparse.ArgumentTypeError(
            f"not a registry prefix ending in '/': {text!r} (e.g. us-docker.pkg.dev/PROJECT/REPO/)"
        )
    return text


def add_options(parser: argparse.ArgumentParser) -> None:
    """The admin's allow-lists (chart values workload.*), shared with ``ckptbench render``."""
    repeatable = "repeatable; default: none"
    for flag, metavar, kind, what in (
        ("--allow-image-prefix", "PREFIX", _image_prefix,
         "a registry prefix, ending in '/', that spec.image may start with besides the default "
         "image (which is always allowed, also pinned by digest); value "
         "workload.allowedImagePrefixes"),
        ("--allow-service-account", "NAME", str,
         "a service account spec.serviceAccountName may name; values "
         "workloadServiceAccount.name and workload.allowedServiceAccountNames"),
        ("--allow-secret", "NAME", str,
         "a Secret spec.volumes may mount (secret volumes, CSI nodePublishSecretRef); value "
         "workload.allowedSecretNames"),
        ("--allow-toleration-key", "KEY", str,
         "a taint key spec.tolerations may name; value workload.allowedTolerationKeys"),
        ("--allow-priority-class", "NAME", str,
         "a PriorityClass spec.priorityClassName may name; value "
         "workload.allowedPriorityClassNames"),
    ):  # fmt: skip
        parser.add_argument(
            flag, action="append", default=[], metavar=metavar, type=kind,
            help=f"{what} ({repeatable})",
        )  # fmt: skip


def from_args(
    args: argparse.Namespace, image: str | None, service_accounts: Iterable[str] = ()
) -> Policy:
    """The policy :func:`add_options` parsed, around the default workload ``image`` and the
    ``service_accounts`` always allowed."""
    return Policy(
        image=image,
        image_prefixes=frozenset(args.allow_image_prefix),
        service_accounts=frozenset([*service_accounts, *args.allow_service_account]),
        secrets=frozenset(args.allow_secret),
        toleration_keys=frozenset(args.allow_toleration_key),
        priority_class_names=frozenset(args.allow_priority_class),
    )
