"""``ckptbench operator``: run the kopf operator, its liveness endpoint and its metrics server.

kopf runs standalone (no peering objects), so run one replica. Imports nothing from the workload
but its pure models: the operator's image carries no torch.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ckptbench.operator.spec import policy as admin

ENV_NAMESPACES = "CKPTBENCH_OPERATOR_NAMESPACES"
ENV_METRICS_PORT = "CKPTBENCH_OPERATOR_METRICS_PORT"
ENV_HEALTH_PORT = "CKPTBENCH_OPERATOR_HEALTH_PORT"
ENV_BIND_ADDRESS = "CKPTBENCH_OPERATOR_BIND_ADDRESS"
# Every address of the pod: the kubelet's probe and Prometheus reach it on the pod's IP.
DEFAULT_BIND_ADDRESS = "0.0.0.0"
ENV_DEFAULT_IMAGE = "CKPTBENCH_DEFAULT_IMAGE"
ENV_DEFAULT_PULL_POLICY = "CKPTBENCH_DEFAULT_IMAGE_PULL_POLICY"
ENV_RESYNC_SECONDS = "CKPTBENCH_OPERATOR_RESYNC_SECONDS"
DEFAULT_RESYNC_SECONDS = 60.0
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
N = TypeVar("N", int, float)
V = TypeVar("V")


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...]  # empty: every namespace
    metrics_port: int
    health_port: int
    default_image: str | None
    default_image_pull_policy: str
    log_level: str
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    allowed_toleration_keys: frozenset[str] = frozenset()
    allowed_priority_classes: frozenset[str] = frozenset()
    allowed_image_prefixes: frozenset[str] = frozenset()
    allowed_service_accounts: frozenset[str] = frozenset()
    allowed_secrets: frozenset[str] = frozenset()
    bind_address: str = DEFAULT_BIND_ADDRESS

    @property
    def health_url(self) -> str:
        host = f"[{self.bind_address}]" if ":" in self.bind_address else self.bind_address
        return f"http://{host}:{self.health_port}/healthz"

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    def admin_policy(self) -> admin.Policy:
        """The allow-lists; the default image is always allowed."""
        return admin.Policy(
            image=self.default_image,
            image_prefixes=self.allowed_image_prefixes,
            service_accounts=self.allowed_service_accounts,
            secrets=self.allowed_secrets,
            toleration_keys=self.allowed_toleration_keys,
            priority_class_names=self.allowed_priority_classes,
        )


def _bounded(convert: Callable[[str], N], what: str, low: int, high: int) -> Callable[[str], N]:
    """An argparse type: a ``what`` read with ``convert``, from ``low`` to ``high``."""

    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} out of range {low}..{high}: {value:g}")
        return value

    return parse


_port = _bounded(int, "port number", 0, 65535)


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an IP address: {text!r} (e.g. 0.0.0.0, 127.0.0.1 or ::)"
        ) from None


_seconds = _bounded(float, "number of seconds", 1, 86_400)


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Options:
    """Command line over environment over defaults; a bad value exits 2 naming the option."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="ckptbench operator",
        description="Run the CheckpointBenchmark operator (kopf, standalone: one replica).",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        action="append",
        default=None,
        metavar="NS",
        help=f"watch this namespace (repeatable; env {ENV_NAMESPACES}, a comma list; "
        "empty: all namespaces)",
    )
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help=f"Prometheus /metrics port (env {ENV_METRICS_PORT}, default 8080)",
    )
    parser.add_argument(
        "--health-port",
        type=_port,
        default=None,
        help=f"liveness GET /healthz port (env {ENV_HEALTH_PORT}, default 8081)",
    )
    parser.add_argument(
        "--bind-address",
        type=_address,
        default=None,
        help=f"address the metrics and health endpoints listen on (env {ENV_BIND_ADDRESS}, "
        f"default {DEFAULT_BIND_ADDRESS}: every address of the pod)",
    )
    parser.add_argument(
        "--default-image",
        default=env.get(ENV_DEFAULT_IMAGE) or None,
        help=f"workload image when a spec names none (env {ENV_DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--default-image-pull-policy",
        choices=PULL_POLICIES,
        default=None,
        help=f"pull policy when a spec names none (env {ENV_DEFAULT_PULL_POLICY}, "
        "default IfNotPresent)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="INFO", type=str.upper)
    parser.add_argument(
        "--resync-seconds",
        type=_seconds,
        default=None,
        help=f"reconcile every benchmark this often, whatever events arrive (env "
        f"{ENV_RESYNC_SECONDS}, default {DEFAULT_RESYNC_SECONDS:g})",
    )
    admin.add_options(parser)
    args = parser.parse_args(list(argv))

    def from_env(name: str, option: str, parse: Callable[[str], V], default: V) -> V:
        text = env.get(name, "").strip()
        if not text:
            return default
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"{name} (for {option}): {exc}")

    if args.all_namespaces:
        namespaces: tuple[str, ...] = ()
    elif args.namespace:
        namespaces = tuple(dict.fromkeys(args.namespace))
    else:
        namespaces = tuple(
            ns.strip() for ns in env.get(ENV_NAMESPACES, "").split(",") if ns.strip()
        )
    policy = args.default_image_pull_policy or env.get(ENV_DEFAULT_PULL_POLICY) or "IfNotPresent"
    if policy not in PULL_POLICIES:
        parser.error(f"{ENV_DEFAULT_PULL_POLICY}: must be one of {', '.join(PULL_POLICIES)}")
    return Options(
        namespaces=namespaces,
        metrics_port=args.metrics_port
        if args.metrics_port is not None
        else from_env(ENV_METRICS_PORT, "--metrics-port", _port, 8080),
        health_port=args.health_port
        if args.health_port is not None
        else from_env(ENV_HEALTH_PORT, "--health-port", _port, 8081),
        default_image=args.default_image,
        default_image_pull_policy=policy,
        log_level=args.log_level,
        resync_seconds=args.resync_seconds
        if args.resync_seconds is not None
        else from_env(ENV_RESYNC_SECONDS, "--resync-seconds", _seconds, DEFAULT_RESYNC_SECONDS),
        allowed_toleration_keys=frozenset(args.allow_toleration_key),
        allowed_priority_classes=frozenset(args.allow_priority_class),
        allowed_image_prefixes=frozenset(args.allow_image_prefix),
        allowed_service_accounts=frozenset(args.allow_service_account),
        allowed_secrets=frozenset(args.allow_secret),
        bind_address=args.bind_address
        if args.bind_address is not None
        else from_env(ENV_BIND_ADDRESS, "--bind-address", _address, DEFAULT_BIND_ADDRESS),
    )


def main(argv: Sequence[str]) -> int:
    options = parse_args(argv)
    logging.basicConfig(
        level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Imported here so that `--help` and option errors need no cluster libraries.
    import kopf

    from ckptbench.operator.render.jobset import RenderDefaults
    from ckptbench.operator.runtime import handlers, kube, metrics, sweep_handlers
    from ckptbench.operator.runtime.reconcile import Reconciler
    from ckptbench.operator.runtime.sweeps import SweepReconciler

    log = logging.getLogger("ckptbench.operator")
    settings = kopf.OperatorSettings()
    # kopf's bookkeeping goes to annotations under our prefix, so status holds our fields only.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="ckptbench.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="ckptbench.dev", key="last-handled-configuration"
    )
    # Watching named namespaces needs no cluster-wide discovery of namespaces and CRDs (nor the
    # RBAC for it); the resources are known in advance.
    settings.scanning.disabled = not options.clusterwide
    settings.peering.standalone = True
    # Only our JobSets and pods stream to the operator, not every pod of the watched namespaces.
    for group, plural in (("jobset.x-k8s.io", "jobsets"), ("", "pods")):
        settings.watching.label_selectors[group, plural] = handlers.WATCH_SELECTOR
    # Our own Events (reconcile.transitions) say what happened; kopf's would add one per handler.
    settings.posting.enabled = False

    defaults = RenderDefaults(
        image=options.default_image,
        image_pull_policy=options.default_image_pull_policy,
        policy=options.admin_policy(),
    )
    try:
        api = kube.Kube(kube.load_config())
    except kube.NoCredentials as exc:
        print(f"ckptbench operator: error: {exc}", file=sys.stderr)
        return 2
    reconciler = Reconciler(
        api=api,
        defaults=defaults,
        namespaces=options.namespaces,
        resync_seconds=options.resync_seconds,
    )
    sweeps = SweepReconciler(api=api, policy=defaults.policy)
    server, thread = metrics.serve(options.metrics_port, options.bind_address)
    log.info(
        "serving metrics on %s:%d, liveness on %s, watching %s (handlers: %s)",
        options.bind_address,
        options.metrics_port,
        options.health_url,
        ", ".join(options.namespaces) or "all namespaces",
        f"{handlers.__name__}, {sweep_handlers.__name__}",
    )
    try:
        kopf.run(
            standalone=True,
            clusterwide=options.clusterwide,
            namespaces=list(options.namespaces),
            liveness_endpoint=options.health_url,
            settings=settings,
            memo=kopf.Memo(reconciler=reconciler, sweeps=sweeps),
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return 0
