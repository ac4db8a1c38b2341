"""``ckptbench operator``: run the kopf operator, its liveness endpoint and its metrics server.

With ``--peering NAME`` the replicas join kopf's peering object NAME and only one of them works
at a time (runtime/peering.py); without it kopf runs standalone, and so must a single replica.
Imports nothing from the workload but its pure models: the operator's image carries no torch.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

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
ENV_PEERING = "CKPTBENCH_OPERATOR_PEERING"
ENV_PEERING_LIFETIME = "CKPTBENCH_OPERATOR_PEERING_LIFETIME"
# kopf's default: a replica killed outright is replaced this long after its last keep-alive.
DEFAULT_PEERING_LIFETIME = 60
# kopf's identity of the replica in the peering object (kopf reads the same variable).
ENV_POD_ID = "POD_ID"
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
    peering: str | None = None  # None: standalone
    peering_lifetime: int = DEFAULT_PEERING_LIFETIME

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
_lifetime = _bounded(int, "whole number of seconds", 2, 3_600)


# A Kubernetes object's name: a DNS subdomain.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _peering_name(text: str) -> str:
    name = text.strip()
    if not _OBJECT_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"not an object name (lower-case letters, digits, '-' and '.'): {text!r}"
        )
    return name


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Options:
    """Command line over environment over defaults; a bad value exits 2 naming the option."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="ckptbench operator",
        description="Run the CheckpointBenchmark and DataLoadingBenchmark operator (kopf; with "
        "--peering, as one of several replicas of which one works at a time).",
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
    parser.add_argument(
        "--peering",
        type=_peering_name,
        default=None,
        metavar="NAME",
        help=f"join kopf's peering object NAME (a KopfPeering in each watched namespace, a "
        f"ClusterKopfPeering with --all-namespaces) so that of several replicas one works at a "
        f"time (env {ENV_PEERING}; default: standalone, run one replica)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=_lifetime,
        default=None,
        metavar="SECONDS",
        help=f"how long a replica's peering record lasts unrenewed: a replica killed outright is "
        f"replaced this long after its last keep-alive (env {ENV_PEERING_LIFETIME}, default "
        f"{DEFAULT_PEERING_LIFETIME})",
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
        peering=args.peering
        if args.peering is not None
        else from_env(ENV_PEERING, "--peering", _peering_name, None),
        peering_lifetime=args.peering_lifetime
        if args.peering_lifetime is not None
        else from_env(
            ENV_PEERING_LIFETIME, "--peering-lifetime", _lifetime, DEFAULT_PEERING_LIFETIME
        ),
    )


def main(argv: Sequence[str]) -> int:
    options = parse_args(argv)
    logging.basicConfig(
        level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Imported here so that `--help` and option errors need no cluster libraries.
    import kopf

    from ckptbench.operator.render.jobset import RenderDefaults
    from ckptbench.operator.runtime import handlers, kube, metrics, peering, sweep_handlers
    from ckptbench.operator.runtime.data.kind import DATA
    from ckptbench.operator.runtime.reconcile import Reconciler
    from ckptbench.operator.runtime.sweeps import SweepReconciler
    from ckptbench.operator.sweep.kinds import DATA_SWEEP

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
    me = None
    if options.peering is None:
        settings.peering.standalone = True
    else:
        me = peering.Peering(
            name=options.peering,
            identity=os.environ.get(ENV_POD_ID) or f"{socket.gethostname()}/{os.getpid()}",
            priority=peering.start_priority(),
            lifetime=options.peering_lifetime,
        )
        settings.peering.lifetime = me.lifetime
        # Keep-alives every few seconds would fill the log otherwise; pauses are still logged.
        settings.peering.stealth = True
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
        client = kube.load_config()
    except kube.NoCredentials as exc:
        print(f"ckptbench operator: error: {exc}", file=sys.stderr)
        return 2
    api = kube.Kube(client)
    leading = None if me is None else peering.gate(api.get_peering, me)
    reconciler = Reconciler(
        api=api,
        defaults=defaults,
        namespaces=options.namespaces,
        resync_seconds=options.resync_seconds,
        leading=leading,
    )
    # DataLoadingBenchmarks: the same reconcile, with the data kind's parts and API.
    data_reconciler = Reconciler(
        api=kube.Kube(client, kube.DATA),
        defaults=defaults,
        namespaces=options.namespaces,
        resync_seconds=options.resync_seconds,
        leading=leading,
        kind=DATA,
    )
    sweeps = SweepReconciler(api=api, policy=defaults.policy)
    data_sweeps = SweepReconciler(
        api=kube.Kube(client, sweeps=DATA_SWEEP), policy=defaults.policy, kind=DATA_SWEEP
    )
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
            standalone=me is None,
            peering_name=None if me is None else me.name,
            priority=None if me is None else me.priority,
            # kopf types the identity as its own NewType of str, not exported.
            identity=None if me is None else cast(Any, me.identity),
            clusterwide=options.clusterwide,
            namespaces=list(options.namespaces),
            liveness_endpoint=options.health_url,
            settings=settings,
            memo=kopf.Memo(
                reconciler=reconciler,
                sweeps=sweeps,
                data_reconciler=data_reconciler,
                data_sweeps=data_sweeps,
            ),
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return 0
