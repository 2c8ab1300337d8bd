"""Container environment and command line, computed as kubelet does (pure: no I/O).

Order (kubelet `makeEnvironmentVariables`): `envFrom` sources in order (keys prefixed, later sources win), then
`env` entries in order, each value `$(VAR)`-expanded against everything defined before it. The image config's
`Env` are defaults under all of that. `command`/`args` replace the image's Entrypoint/Cmd (command alone drops
Cmd) and are expanded against the final environment. `$$` escapes `$`; an undefined `$(X)` stays literally.

A missing ConfigMap/Secret or key that is not `optional` raises `ConfigError` (kubelet's
CreateContainerConfigError); the pod runner shows it as the container's waiting reason and retries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import field
from fractions import Fraction
from typing import Any

from lite.quantity import parse_quantity
from lite.records import dataclass

Obj = dict[str, Any]
CONFIG_ERROR = "CreateContainerConfigError"


class ConfigError(Exception):
    """A container's configuration cannot be built yet (reason CreateContainerConfigError)."""

    reason = CONFIG_ERROR


@dataclass(frozen=True)
class PodContext:
    """What env/volume sources may read besides the pod: relayed objects and node facts."""

    config_maps: Mapping[str, Obj] = field(default_factory=dict)  # name -> ConfigMap in the pod's namespace
    secrets: Mapping[str, Obj] = field(default_factory=dict)  # name -> Secret (data base64, as on the wire)
    host_ip: str = ""
    pod_ip: str = ""
    node_allocatable: Mapping[str, str] = field(default_factory=dict)
    claims: Mapping[str, Obj] = field(default_factory=dict)  # name -> relayed PVC in the pod's namespace
    volumes: Mapping[str, Obj] = field(default_factory=dict)  # name -> relayed PersistentVolume
    # serviceAccountToken projections by `satokens.token_key`; None: tokens are not provided on this node.
    tokens: Mapping[str, str] | None = None
    # KUBERNETES_SERVICE_HOST & co. (`lite.agent.serviceenv`): under the container's own env.
    service_env: Mapping[str, str] = field(default_factory=dict)


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes `$(VAR)` expansion (third_party/forked/golang/expansion semantics)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2:close]
            value = lookup(name)
            out.append(value if value is not None else f"$({name})")
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def _decode_secret(secret: Obj) -> dict[str, str]:
    import base64

    data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    return data


def _cm_data(cm: Obj) -> dict[str, str]:
    return dict(cm.get("data") or {})


def _source(ctx: PodContext, kind: str, name: str, optional: bool) -> dict[str, str] | None:
    if kind == "configmap":
        cm = ctx.config_maps.get(name)
        if cm is None:
            if optional:
                return None
            raise ConfigError(f'configmap "{name}" not found')
        return _cm_data(cm)
    sec = ctx.secrets.get(name)
    if sec is None:
        if optional:
            return None
        raise ConfigError(f'secret "{name}" not found')
    return _decode_secret(sec)


def field_ref(pod: Obj, path: str, ctx: PodContext) -> str:
    """Value of a downward-API `fieldRef.fieldPath` for env (and downwardAPI volumes)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        values: dict[str, str] = meta.get(key) or {}
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        if path.startswith(prefix + "['") and path.endswith("']"):
            return values.get(path[len(prefix) + 2:-2], "")
    raise ConfigError(f"unsupported fieldPath {path!r}")


def resource_ref(container: Obj, ref: Obj, ctx: PodContext) -> str:
    """Value of a `resourceFieldRef`: requests/limits in units of `divisor`, rounded up (limits default to the
    node's allocatable, as kubelet does)."""
    resource: str = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    res = (container.get("resources") or {}).get(kind) or {}
    raw = res.get(name)
    if raw is None and kind == "limits":
        raw = ctx.node_allocatable.get(name)
    value = parse_quantity(str(raw)) if raw is not None else Fraction(0)
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    if divisor == 0:
        divisor = Fraction(1)
    return str(math.ceil(value / divisor))


def _value_from(pod: Obj, container: Obj, src: Obj, ctx: PodContext) -> str | None:
    if "fieldRef" in src:
        return field_ref(pod, src["fieldRef"].get("fieldPath", ""), ctx)
    if "resourceFieldRef" in src:
        return resource_ref(container, src["resourceFieldRef"], ctx)
    for key, kind, label in (("configMapKeyRef", "configmap", "ConfigMap"), ("secretKeyRef", "secret", "Secret")):
        if key in src:
            ref = src[key]
            optional = bool(ref.get("optional"))
            data = _source(ctx, kind, ref.get("name", ""), optional)
            if data is None:
                return None
            if ref.get("key") not in data:
                if optional:
                    return None
                ns = (pod.get("metadata") or {}).get("namespace", "")
                raise ConfigError(f"couldn't find key {ref.get('key')} in {label} {ns}/{ref.get('name')}")
            return data[ref["key"]]
    return None


def container_env(pod: Obj, container: Obj, ctx: PodContext) -> dict[str, str]:
    """The container's own environment (service variables, then envFrom, then env), without the image
    defaults."""
    env: dict[str, str] = dict(ctx.service_env)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for key, kind in (("configMapRef", "configmap"), ("secretRef", "secret")):
            if key in src:
                data = _source(ctx, kind, src[key].get("name", ""), bool(src[key].get("optional")))
                for k, v in (data or {}).items():
                    env[prefix + k] = v
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "valueFrom" in item:
            value = _value_from(pod, container, item["valueFrom"], ctx)
            if value is None:
                continue
            env[name] = value
        else:
            env[name] = expand(str(item.get("value", "")), env.get)
    return env


def merge_image_env(image_env: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """Image `Env` ("K=V" strings) as defaults under the container's variables, image order first."""
    merged: dict[str, str] = {}
    for entry in image_env:
        k, _, v = entry.partition("=")
        merged[k] = v
    merged.update(env)
    return merged


def command_line(container: Obj, entrypoint: list[str], cmd: list[str], env: Mapping[str, str]) -> list[str]:
    """argv from command/args over the image Entrypoint/Cmd, with `$(VAR)` expanded (kubelet semantics)."""
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = list(command) + list(args or [])
    elif args is not None and args != []:
        argv = list(entrypoint) + list(args)
    else:
        argv = list(entrypoint) + list(cmd)
    return [expand(a, env.get) for a in argv]
