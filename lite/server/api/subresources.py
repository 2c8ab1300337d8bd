"""Subresources: scale, pods/binding, pods/eviction, namespaces/finalize, serviceaccounts/token.

- `scale` presents an autoscaling/v1 Scale for Deployments, ReplicaSets, StatefulSets,
  ReplicationControllers and custom objects whose CRD declares a scale subresource; writes set
  spec.replicas (or the CRD's specReplicasPath) with the Scale's resourceVersion as precondition.
- `binding` sets spec.nodeName once (409 Conflict if already bound) and marks PodScheduled; answers a
  Status Success (201).
- `eviction` deletes the pod with the Eviction's deleteOptions after the optional `eviction_check` hook
  (the disruption controller's PDB check, which may raise 429); answers a Status Success (201).
- `finalize` replaces a Namespace's spec.finalizers.
- `token` answers a TokenRequest: the spec is validated and defaulted here, the token is made by the
  `token_issuer` hook (`lite.server.authn`: a signed, possibly pod- or secret-bound JWT); without one, a
  random opaque token that nothing accepts.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

import orjson

from lite import errors
from lite.client import PatchType
from lite.kinds import Kind
from lite.objects import deep_copy, now, rfc3339
from lite.patch import apply
from lite.selectors import LabelSelector
from lite.server.api.deletion import DeleteMixin
from lite.server.api.params import check_delete_body, validate_delete_options
from lite.server.api.patching import PatchMixin
from lite.server.api.registry_base import Obj
from lite.server.api.strategies.crd import scale_paths

SCALE_GKS = ("Deployment.apps", "ReplicaSet.apps", "StatefulSet.apps", "ReplicationController")
_TOKEN_MIN, _TOKEN_DEFAULT, _TOKEN_MAX = 600, 3600, 2**32
_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


def success(code: int = 201) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _path(path: str) -> list[str]:
    return [p for p in path.strip(".").split(".") if p]


def _get_path(obj: Any, path: str) -> Any:
    for p in _path(path):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


def _set_path(obj: Obj, path: str, value: Any) -> None:
    parts = _path(path)
    for p in parts[:-1]:
        nxt = obj.get(p)
        if not isinstance(nxt, dict):
            nxt = obj[p] = {}
        obj = nxt
    obj[parts[-1]] = value


class SubresourceMixin(PatchMixin, DeleteMixin):
    """The subresources listed in the module docstring."""

    # ---- scale -------------------------------------------------------------------------------------

    def _scale_paths(self, kind: Kind) -> tuple[str, str, str]:
        """(specReplicasPath, statusReplicasPath, labelSelectorPath) or 404 when the kind has no scale."""
        if "scale" not in kind.subresources:
            raise errors.path_not_found()
        if not kind.crd:
            return ".spec.replicas", ".status.replicas", ""
        got = self.store.get(f"apiextensions.k8s.io/customresourcedefinitions/{kind.plural}.{kind.group}")
        paths = scale_paths(orjson.loads(got[1]), kind.version) if got else None  # the CRD, not a custom object
        if not paths:
            raise errors.path_not_found()
        return (str(paths.get("specReplicasPath", ".spec.replicas")),
                str(paths.get("statusReplicasPath", ".status.replicas")), str(paths.get("labelSelectorPath", "")))

    def scale_of(self, kind: Kind, obj: Obj) -> Obj:
        spec_path, status_path, selector_path = self._scale_paths(kind)
        meta = obj.get("metadata") or {}
        if kind.crd:
            selector = _get_path(obj, selector_path) if selector_path else None
        elif kind.gk == "ReplicationController":
            sel = (obj.get("spec") or {}).get("selector") or {}
            selector = ",".join(f"{k}={v}" for k, v in sorted(sel.items()))
        else:
            selector = str(LabelSelector.from_dict((obj.get("spec") or {}).get("selector") or {}))
        status: Obj = {"replicas": int(_get_path(obj, status_path) or 0)}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int(_get_path(obj, spec_path) or 0)},
            "status": status,
        }

    async def write_scale(self, kind: Kind, namespace: str, name: str, scale_of_old: Any, *,
                          dry_run: bool = False, manager: str = "", apply_force: bool | None = None) -> Obj:
        """`scale_of_old(scale) -> new Scale`; sets the replicas it names, guarded by the Scale's RV. `manager`
        then owns the replicas field in the parent's managedFields (an entry with subresource `scale`): an
        Update, or with `apply_force` set (a server-side apply of the Scale) an Apply, which conflicts with
        other owners of the field unless forced."""
        spec_path, _, _ = self._scale_paths(kind)

        def build(old: Obj) -> Obj:
            scale = scale_of_old(self.scale_of(kind, old))
            replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale, dict) else None
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise errors.invalid("Scale", name, [errors.field_invalid(
                    "spec.replicas", replicas, "must be greater than or equal to 0")], "autoscaling")
            if apply_force is None:
                new = deep_copy(old)
                _set_path(new, spec_path, replicas)
            else:
                intent: Obj = {}
                _set_path(intent, spec_path, replicas)
                new = apply(old, intent, manager=manager, force=apply_force, api_version=kind.api_version,
                            now=rfc3339(), schema=self.schema(kind), subresource="scale")
            new["metadata"]["resourceVersion"] = str((scale.get("metadata") or {}).get("resourceVersion") or "")
            return new

        out, _ = await self.update_loop(kind, namespace, name, build, subresource="scale", dry_run=dry_run,
                                        manager=manager if apply_force is None else "")
        return self.scale_of(kind, out)

    async def update_scale(self, kind: Kind, namespace: str, name: str, body: Obj, dry_run: bool,
                           manager: str = "") -> Obj:
        return await self.write_scale(kind, namespace, name, lambda _s: body, dry_run=dry_run, manager=manager)

    async def patch_scale(self, kind: Kind, namespace: str, name: str, patch: Any, patch_type: PatchType,
                          dry_run: bool, manager: str = "", force: bool = False) -> Obj:
        scale_kind = Kind("autoscaling", "v1", "Scale", "scale", True)

        def patched(scale: Obj) -> Obj:
            out = self.apply_patch(scale_kind, scale, patch, "merge" if patch_type == "apply" else patch_type)
            if not ((patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None) \
                    and patch_type != "json":
                out.setdefault("metadata", {})["resourceVersion"] = ""
            return out

        return await self.write_scale(kind, namespace, name, patched, dry_run=dry_run, manager=manager,
                                      apply_force=force if patch_type == "apply" else None)

    # ---- pods/binding and pods/eviction ------------------------------------------------------------

    async def bind(self, kind: Kind, namespace: str, name: str, binding: Obj, dry_run: bool) -> Obj:
        target = binding.get("target") if isinstance(binding, dict) else None
        bmeta = (binding.get("metadata") or {}) if isinstance(binding, dict) else {}
        if bmeta.get("name") and bmeta["name"] != name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        node = str((target or {}).get("name") or "")
        if not node:
            raise errors.invalid("Binding", name, [errors.field_required("target.name")])
        target_kind = (target or {}).get("kind")
        if target_kind not in (None, "", "Node"):
            raise errors.invalid("Binding", name, [errors.field_not_supported("target.kind", target_kind, ["Node"])])

        def build(old: Obj) -> Obj:
            spec = old.get("spec") or {}
            if (old.get("metadata") or {}).get("deletionTimestamp"):
                raise errors.conflict("pods/binding", name, "", f"pod {name} is being deleted, cannot be assigned "
                                      "to a host")
            if spec.get("nodeName"):
                raise errors.conflict("pods/binding", name, "",
                                      f'pod {name} is already assigned to node "{spec["nodeName"]}"')
            if spec.get("schedulingGates"):
                raise errors.conflict("pods/binding", name, "", f"pod {name} has non-empty .spec.schedulingGates")
            new = deep_copy(old)
            new["spec"]["nodeName"] = node
            if bmeta.get("annotations"):
                new["metadata"].setdefault("annotations", {}).update(bmeta["annotations"])
            conds = new.setdefault("status", {}).setdefault("conditions", [])
            cond = next((c for c in conds if c.get("type") == "PodScheduled"), None)
            if cond is None:
                conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": rfc3339()})
            elif cond.get("status") != "True":
                cond.update(status="True", lastTransitionTime=rfc3339())
                cond.pop("reason", None)
                cond.pop("message", None)
            new["metadata"]["resourceVersion"] = ""
            return new

        await self.update_loop(kind, namespace, name, build, subresource="binding", dry_run=dry_run)
        return success()

    async def evict(self, kind: Kind, namespace: str, name: str, eviction: Obj, dry_run: bool) -> Obj:
        emeta = (eviction.get("metadata") or {}) if isinstance(eviction, dict) else {}
        if emeta.get("name") and emeta["name"] != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        opts = check_delete_body(eviction.get("deleteOptions"), "Eviction.deleteOptions") \
            if isinstance(eviction, dict) else {}
        validate_delete_options(opts)
        _, pod = self.read(kind, namespace, name)
        exempt = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Pending") or \
            (pod.get("metadata") or {}).get("deletionTimestamp")
        if self.eviction_check is not None and not exempt:
            await self.eviction_check(pod, eviction)
        grace = opts.get("gracePeriodSeconds")
        await self.delete_object(kind, namespace, name, propagation_policy=opts.get("propagationPolicy"),
                                 grace_period_seconds=int(grace) if grace is not None else None,
                                 preconditions=opts.get("preconditions"),
                                 dry_run=dry_run or "All" in (opts.get("dryRun") or []))
        return success()

    # ---- namespaces/finalize and serviceaccounts/token ---------------------------------------------

    async def finalize_namespace(self, kind: Kind, name: str, body: Obj, dry_run: bool) -> Obj:
        finalizers = list(((body.get("spec") or {}) if isinstance(body, dict) else {}).get("finalizers") or [])
        rv = ((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("resourceVersion") or ""

        def build(old: Obj) -> Obj:
            new = deep_copy(old)
            new.setdefault("spec", {})["finalizers"] = finalizers
            new["metadata"]["resourceVersion"] = rv
            return new

        out, _ = await self.update_loop(kind, "", name, build, subresource="finalize", dry_run=dry_run)
        return out

    async def request_token(self, kind: Kind, namespace: str, name: str, body: Obj) -> Obj:
        _, sa = self.read(kind, namespace, name)  # 404 for a missing service account
        spec = dict((body.get("spec") or {}) if isinstance(body, dict) else {})
        seconds = spec.get("expirationSeconds")
        seconds = _TOKEN_DEFAULT if seconds is None else seconds
        if not isinstance(seconds, int) or seconds < _TOKEN_MIN:
            raise errors.invalid("TokenRequest", name, [errors.field_invalid(
                "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes")],
                "authentication.k8s.io")
        if seconds > _TOKEN_MAX:
            raise errors.invalid("TokenRequest", name, [errors.field_invalid(
                "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds")],
                "authentication.k8s.io")
        spec["expirationSeconds"] = seconds
        # Empty audiences are the issuer's to default (the API audiences it is configured with).
        spec["audiences"] = list(spec.get("audiences") or ([] if self.token_issuer else [_AUDIENCE]))
        spec.setdefault("boundObjectRef", None)
        issued = now()
        token, expires = secrets.token_urlsafe(32), issued + dt.timedelta(seconds=seconds)
        if self.token_issuer is not None:
            token, exp = self.token_issuer(namespace, sa, spec)
            expires = dt.datetime.fromtimestamp(exp, dt.UTC)
        return {
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(issued)},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": rfc3339(expires)},
        }
