"""The Pod Security Standards' "restricted" profile (Kubernetes v1.30), one check per control.

Each check takes a pod spec and returns what breaks the control (empty: the pod complies), as
https://kubernetes.io/docs/concepts/security/pod-security-standards/ defines it. The restricted
profile includes every baseline control.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

PodSpec = Mapping[str, Any]
Check = Callable[[PodSpec], list[str]]

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    }
)  # fmt: skip
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
        "projected", "secret",
    }
)  # fmt: skip


def _containers(pod: PodSpec) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def _ctx(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def host_process(pod: PodSpec) -> list[str]:
    contexts = [pod.get("securityContext") or {}, *map(_ctx, _containers(pod))]
    return [
        "windowsOptions.hostProcess"
        for c in contexts
        if (c.get("windowsOptions") or {}).get("hostProcess")
    ]


def host_namespaces(pod: PodSpec) -> list[str]:
    return [key for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]


def privileged(pod: PodSpec) -> list[str]:
    return [f"{c['name']}: privileged" for c in _containers(pod) if _ctx(c).get("privileged")]


def baseline_capabilities(pod: PodSpec) -> list[str]:
    return [
        f"{c['name']}: adds {cap}"
        for c in _containers(pod)
        for cap in (_ctx(c).get("capabilities") or {}).get("add") or []
        if cap not in BASELINE_CAPABILITIES
    ]


def host_path_volumes(pod: PodSpec) -> list[str]:
    return [f"volume {v['name']}: hostPath" for v in pod.get("volumes") or [] if "hostPath" in v]


def host_ports(pod: PodSpec) -> list[str]:
    return [
        f"{c['name']}: hostPort {p['hostPort']}"
        for c in _containers(pod)
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def app_armor(pod: PodSpec) -> list[str]:
    contexts = [pod.get("securityContext") or {}, *map(_ctx, _containers(pod))]
    return [
        "appArmorProfile Unconfined"
        for c in contexts
        if (c.get("appArmorProfile") or {}).get("type") == "Unconfined"
    ]


def se_linux(pod: PodSpec) -> list[str]:
    found = []
    for c in [pod.get("securityContext") or {}, *map(_ctx, _containers(pod))]:
        options = c.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES:
            found.append(f"seLinuxOptions.type {options['type']}")
        found += [f"seLinuxOptions.{key}" for key in ("user", "role") if options.get(key)]
    return found


def proc_mount(pod: PodSpec) -> list[str]:
    return [
        f"{c['name']}: procMount {_ctx(c)['procMount']}"
        for c in _containers(pod)
        if _ctx(c).get("procMount", "Default") != "Default"
    ]


def sysctls(pod: PodSpec) -> list[str]:
    listed = (pod.get("securityContext") or {}).get("sysctls") or []
    return [f"sysctl {s['name']}" for s in listed if s.get("name") not in SAFE_SYSCTLS]


def volume_types(pod: PodSpec) -> list[str]:
    return [
        f"volume {v['name']}: {kind}"
        for v in pod.get("volumes") or []
        for kind in v
        if kind != "name" and kind not in RESTRICTED_VOLUMES
    ]


def privilege_escalation(pod: PodSpec) -> list[str]:
    return [
        f"{c['name']}: allowPrivilegeEscalation is not false"
        for c in _containers(pod)
        if _ctx(c).get("allowPrivilegeEscalation") is not False
    ]


def running_as_non_root(pod: PodSpec) -> list[str]:
    pod_level = (pod.get("securityContext") or {}).get("runAsNonRoot")
    found = []
    for c in _containers(pod):
        value = _ctx(c).get("runAsNonRoot")
        if value is False or (value is None and pod_level is not True):
            found.append(f"{c['name']}: runAsNonRoot is not true")
    return found


def running_as_non_root_user(pod: PodSpec) -> list[str]:
    contexts = [pod.get("securityContext") or {}, *map(_ctx, _containers(pod))]
    return ["runAsUser 0" for c in contexts if c.get("runAsUser") == 0]


def seccomp(pod: PodSpec) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = ((pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    found = [] if pod_type in (None, *allowed) else [f"pod seccompProfile {pod_type}"]
    for c in _containers(pod):
        own = (_ctx(c).get("seccompProfile") or {}).get("type")
        if own is not None and own not in allowed:
            found.append(f"{c['name']}: seccompProfile {own}")
        elif own is None and pod_type is None:
            found.append(f"{c['name']}: no seccompProfile")
    return found


def restricted_capabilities(pod: PodSpec) -> list[str]:
    found = []
    for c in _containers(pod):
        capabilities = _ctx(c).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{c['name']}: does not drop ALL")
        found += [
            f"{c['name']}: adds {cap}"
            for cap in capabilities.get("add") or []
            if cap != "NET_BIND_SERVICE"
        ]
    return found


RESTRICTED: dict[str, Check] = {
    "host-process": host_process,
    "host-namespaces": host_namespaces,
    "privileged-containers": privileged,
    "capabilities-baseline": baseline_capabilities,
    "host-path-volumes": host_path_volumes,
    "host-ports": host_ports,
    "app-armor": app_armor,
    "se-linux": se_linux,
    "proc-mount-type": proc_mount,
    "sysctls": sysctls,
    "volume-types": volume_types,
    "privilege-escalation": privilege_escalation,
    "running-as-non-root": running_as_non_root,
    "running-as-non-root-user": running_as_non_root_user,
    "seccomp": seccomp,
    "capabilities-restricted": restricted_capabilities,
}
