"""Protobuf request-body decoding: real kubectl 1.32 bodies (tests/fixtures/protobuf) and hand-built wire cases."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lite.errors import ApiError
from lite.server.api.protobuf import decode, decode_delete_options

FIXTURES = Path(__file__).parent.parent / "fixtures" / "protobuf"
CASES = sorted(p.stem for p in FIXTURES.glob("*.bin"))


def fixture(name: str) -> dict[str, Any]:
    return decode((FIXTURES / f"{name}.bin").read_bytes())


# --- a tiny encoder, only to build wire cases kubectl does not send ----------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fld(num: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return b"k8s\x00" + fld(1, fld(1, api_version) + fld(2, kind)) + fld(2, raw)


# --- real kubectl bodies -----------------------------------------------------------------------------


def test_all_captured_cases_present() -> None:
    assert len(CASES) >= 25
    for case in CASES:
        assert (FIXTURES / f"{case}.json").exists(), case


@pytest.mark.parametrize("case", CASES)
def test_kubectl_body_decodes_to_expected_json(case: str) -> None:
    expected = json.loads((FIXTURES / f"{case}.json").read_text())
    assert fixture(case) == expected


@pytest.mark.parametrize("case", [p.name.removesuffix(".dryrun.json") for p in FIXTURES.glob("*.dryrun.json")])
def test_matches_kubectl_dry_run_output(case: str) -> None:
    """What kubectl prints with -o json --dry-run=client is the object it sends (nulls aside)."""
    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if v is not None}
        return [strip(v) for v in o] if isinstance(o, list) else o

    assert fixture(case) == strip(json.loads((FIXTURES / f"{case}.dryrun.json").read_text()))


def test_deployment_fields() -> None:
    d = fixture("deployment")
    assert (d["apiVersion"], d["kind"]) == ("apps/v1", "Deployment")
    assert d["spec"]["replicas"] == 3
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c == {"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}], "resources": {}}
    assert d["spec"]["strategy"] == {}
    assert "creationTimestamp" not in d["metadata"]


def test_pointer_zero_survives() -> None:
    d = fixture("deployment_cmd")
    assert d["spec"]["replicas"] == 0
    assert d["spec"]["template"]["spec"]["containers"][0]["command"] == ["sh", "-c", "sleep 3600"]


def test_secret_bytes_are_base64() -> None:
    s = fixture("secret")
    assert base64.b64decode(s["data"]["pw"]).decode() == "s3cr\u00e9t"
    assert base64.b64decode(s["data"]["user"]) == b"admin"
    assert s["type"] == "Opaque"
    assert fixture("secret_tls_type")["data"] == {"x": ""}


def test_service_int_or_string_and_ports() -> None:
    ports = fixture("service_clusterip")["spec"]["ports"]
    assert ports[0]["targetPort"] == 8080 and ports[0]["port"] == 80 and ports[0]["protocol"] == "TCP"
    assert ports[1]["targetPort"] == "https"
    np = fixture("service_nodeport")["spec"]
    assert np["type"] == "NodePort" and np["ports"][0]["nodePort"] == 30080
    assert fixture("service_headless")["spec"]["clusterIP"] == "None"


def test_negative_int_and_quantities() -> None:
    assert fixture("priorityclass_negative")["value"] == -5
    pc = fixture("priorityclass")
    assert (pc["value"], pc["preemptionPolicy"], pc["description"]) == (1000, "Never", "high prio")
    q = fixture("quota")["spec"]
    assert q["hard"] == {"cpu": "1", "memory": "1G", "pods": "10", "requests.storage": "5Gi"}
    assert q["scopes"] == ["BestEffort"]


def test_pdb_int_or_string() -> None:
    assert fixture("pdb_min")["spec"]["minAvailable"] == 2
    assert fixture("pdb_max_pct")["spec"]["maxUnavailable"] == "50%"


def test_token_and_access_review() -> None:
    t = fixture("token")
    assert t["spec"] == {"audiences": ["a1", "a2"], "expirationSeconds": 600}
    assert fixture("token_bound")["spec"]["boundObjectRef"]["uid"] == "1234"
    r = fixture("can_i")
    assert r["spec"]["resourceAttributes"] == {"namespace": "dev", "verb": "create", "resource": "deployments.apps"}


# --- hand-built wire cases ---------------------------------------------------------------------------


def test_delete_options() -> None:
    raw = fld(1, 0) + fld(2, fld(1, "uid-1") + fld(2, "7")) + fld(4, "Background") + fld(5, "All")
    got = decode_delete_options(envelope("v1", "DeleteOptions", raw))
    assert got == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "uid-1", "resourceVersion": "7"},
                   "propagationPolicy": "Background", "dryRun": ["All"]}
    assert decode(envelope("meta.k8s.io/v1", "DeleteOptions", fld(3, 1)))["orphanDependents"] is True


def test_pod_time_volumes_and_unknown_fields() -> None:
    meta = fld(1, "p") + fld(8, fld(1, 1700000000)) + fld(11, fld(1, "a") + fld(2, "b")) + fld(99, "future")
    volume = fld(1, "scratch") + fld(2, fld(2, b""))  # VolumeSource is inline in JSON; emptyDir empty but set
    container = fld(1, "c") + fld(2, "img") + fld(8, fld(1, fld(1, "cpu") + fld(2, fld(1, "250m"))))
    spec = fld(1, volume) + fld(2, container) + fld(4, -1) + fld(30, 0)
    pod = decode(envelope("v1", "Pod", fld(1, meta) + fld(2, spec)))
    assert pod["metadata"] == {"name": "p", "creationTimestamp": "2023-11-14T22:13:20Z", "labels": {"a": "b"}}
    assert pod["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "250m"}}
    assert pod["spec"]["terminationGracePeriodSeconds"] == -1
    assert pod["spec"]["enableServiceLinks"] is False


def test_packed_repeated_scalars() -> None:
    # PodSecurityContext.supplementalGroups (repeated int64): accept packed and unpacked encodings.
    sc = fld(4, varint(1) + varint(2)) + fld(4, 3)
    pod = decode(envelope("v1", "Pod", fld(2, fld(14, sc))))
    assert pod["spec"]["securityContext"]["supplementalGroups"] == [1, 2, 3]


def test_unknown_type_is_415_naming_it() -> None:
    with pytest.raises(ApiError) as e:
        decode(envelope("example.com/v1", "Widget", b""))
    assert e.value.code == 415 and e.value.reason == "UnsupportedMediaType"
    assert "Widget" in e.value.message


def _micro(seconds: int, nanos: int) -> bytes:
    return fld(1, seconds) + fld(2, nanos)


def test_lease_with_micro_times() -> None:
    """What client-go's leader election sends (coordination.k8s.io/v1 Lease, generated.proto numbers)."""
    spec = fld(1, "node-a") + fld(2, 15) + fld(3, _micro(1700000000, 123456000)) + fld(4, _micro(1700000010, 0)) \
        + fld(5, 2)
    lease = decode(envelope("coordination.k8s.io/v1", "Lease", fld(1, fld(1, "ctrl") + fld(3, "kube-system"))
                            + fld(2, spec)))
    assert lease == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": "ctrl", "namespace": "kube-system"},
                     "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 15,
                              "acquireTime": "2023-11-14T22:13:20.123456Z", "renewTime": "2023-11-14T22:13:30.000000Z",
                              "leaseTransitions": 2}}


def test_times_before_year_1000_keep_four_digit_years() -> None:
    """RFC 3339 years have four digits: Go cannot parse `1-01-01T00:00:02.000000Z` (glibc's %Y writes that)."""
    year_one = -62135596800 + 2  # 0001-01-01T00:00:02Z in Unix seconds
    spec = fld(3, _micro(year_one, 0)) + fld(4, _micro(year_one + 3600 * 24 * 365 * 98, 500000000))
    lease = decode(envelope("coordination.k8s.io/v1", "Lease", fld(1, fld(1, "old")) + fld(2, spec)))
    assert (lease["spec"]["acquireTime"], lease["spec"]["renewTime"]) == \
        ("0001-01-01T00:00:02.000000Z", "0098-12-08T00:00:02.500000Z")
    pod = decode(envelope("v1", "Pod", fld(1, fld(1, "p") + fld(8, fld(1, year_one)))))
    assert pod["metadata"]["creationTimestamp"] == "0001-01-01T00:00:02Z"


def test_events_v1_event() -> None:
    regarding = fld(1, "Pod") + fld(2, "default") + fld(3, "web-1") + fld(5, "v1")
    body = (fld(1, fld(1, "web-1.abc") + fld(3, "default")) + fld(2, _micro(1700000000, 5000))
            + fld(4, "lite/scheduler") + fld(5, "node-a") + fld(6, "Binding") + fld(7, "Scheduled")
            + fld(8, regarding) + fld(10, "assigned") + fld(11, "Normal"))
    ev = decode(envelope("events.k8s.io/v1", "Event", body))
    assert ev["eventTime"] == "2023-11-14T22:13:20.000005Z"
    assert ev["regarding"] == {"kind": "Pod", "namespace": "default", "name": "web-1", "apiVersion": "v1"}
    assert (ev["reportingController"], ev["reportingInstance"], ev["action"], ev["reason"], ev["note"],
            ev["type"]) == ("lite/scheduler", "node-a", "Binding", "Scheduled", "assigned", "Normal")


def test_endpoint_slice_conditions_and_ports() -> None:
    ep = fld(1, "10.42.0.5") + fld(2, fld(1, 1) + fld(2, 1) + fld(3, 0)) + fld(6, "node-a")
    port = fld(1, "http") + fld(2, "TCP") + fld(3, 8080)
    body = fld(1, fld(1, "web-abc") + fld(3, "default")) + fld(2, ep) + fld(3, port) + fld(4, "IPv4")
    es = decode(envelope("discovery.k8s.io/v1", "EndpointSlice", body))
    assert es["addressType"] == "IPv4"
    assert es["endpoints"] == [{"addresses": ["10.42.0.5"], "nodeName": "node-a",
                                "conditions": {"ready": True, "serving": True, "terminating": False}}]
    assert es["ports"] == [{"name": "http", "protocol": "TCP", "port": 8080}]


@pytest.mark.parametrize("api_version_kind", [
    "v1/Pod", "apps/v1/Deployment", "coordination.k8s.io/v1/Lease", "events.k8s.io/v1/Event",
    "discovery.k8s.io/v1/EndpointSlice", "autoscaling/v2/HorizontalPodAutoscaler", "autoscaling/v1/Scale",
    "node.k8s.io/v1/RuntimeClass", "storage.k8s.io/v1/StorageClass", "storage.k8s.io/v1/CSIStorageCapacity",
    "rbac.authorization.k8s.io/v1/ClusterRole", "networking.k8s.io/v1/NetworkPolicy",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
])
def test_every_served_builtin_kind_decodes(api_version_kind: str) -> None:
    api_version, _, kind = api_version_kind.rpartition("/")
    obj = decode(envelope(api_version, kind, fld(1, fld(1, "x"))))
    assert obj == {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}


@pytest.mark.parametrize("body", [
    b"not protobuf",
    b"k8s\x00\x0a\xff",  # length past the end
    b"k8s\x00\x0a",  # truncated varint
    envelope("v1", "Namespace", fld(1, 5)),  # ObjectMeta as a varint
    envelope("v1", "Namespace", fld(1, fld(1, b"\xff\xfe"))),  # name not UTF-8
    envelope("v1", "Namespace", b"\x0b"),  # wire type 3 (groups) unsupported
])
def test_malformed_is_400(body: bytes) -> None:
    with pytest.raises(ApiError) as e:
        decode(body)
    assert e.value.code == 400 and e.value.reason == "BadRequest"


def test_delete_options_rejects_other_kinds() -> None:
    with pytest.raises(ApiError) as e:
        decode_delete_options(envelope("v1", "Pod", b""))
    assert e.value.code == 400


def test_probe_handler_inline_and_env_from_secret_ref() -> None:
    probe = fld(1, fld(2, fld(1, "/healthz") + fld(2, fld(1, 1) + fld(3, "http")))) + fld(2, 5)
    env_from = fld(3, fld(1, fld(1, "creds")))  # SecretEnvSource embeds LocalObjectReference
    container = fld(1, "c") + fld(10, probe) + fld(19, env_from)
    c = decode(envelope("v1", "Pod", fld(2, fld(2, container))))["spec"]["containers"][0]
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5}
    assert c["envFrom"] == [{"secretRef": {"name": "creds"}}]


# --- live: the kubectl on this machine, decoded as it sends ---------------------------------------------

KUBECTL = shutil.which("kubectl")
LIVE = [
    ["create", "deployment", "live", "--image=busybox:1.36", "--replicas=0", "--port=8080", "--", "sleep", "1"],
    ["create", "secret", "generic", "live", "--from-literal=k=v\u00e9", "--type=x/y"],
    ["create", "service", "nodeport", "live", "--tcp=80:http", "--node-port=30001"],
    ["create", "cronjob", "live", "--image=busybox", "--schedule=0 * * * *"],
    ["create", "quota", "live", "--hard=pods=3,limits.memory=2Gi"],
]


async def _run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
@pytest.mark.parametrize("args", LIVE, ids=lambda a: a[1])
async def test_live_kubectl_body_equals_its_dry_run(tmp_path: Path, args: list[str]) -> None:
    decoded: list[dict[str, Any]] = []

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.4"})

    async def create(request: web.Request) -> web.Response:
        assert request.content_type == "application/vnd.kubernetes.protobuf"
        obj = decode(await request.read())
        decoded.append(obj)
        return web.json_response(obj, status=201)

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_post("/{tail:.*}", create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{runner.addresses[0][1]}"}}],
            "users": [{"name": "u", "user": {"token": "x"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        assert KUBECTL is not None
        base = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
        split = args.index("--") if "--" in args else len(args)
        rc, out, err = await _run(*base, *args[:split], "-o", "json", "--dry-run=client", *args[split:])
        assert rc == 0, err
        rc, _, err = await _run(*base, *args)
        assert rc == 0, err
    finally:
        await runner.cleanup()

    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if v is not None}
        return [strip(v) for v in o] if isinstance(o, list) else o

    assert decoded == [strip(json.loads(out))]


# Kinds whose upstream types live outside kubernetes/api (apiextensions-apiserver, kube-aggregator): their
# clients (the apiextensions and aggregator clientsets) send JSON; the flowcontrol objects are read-only here.
_JSON_ONLY = {"apiextensions.k8s.io/v1/CustomResourceDefinition", "apiregistration.k8s.io/v1/APIService",
              "flowcontrol.apiserver.k8s.io/v1/FlowSchema",
              "flowcontrol.apiserver.k8s.io/v1/PriorityLevelConfiguration"}


def test_every_writable_builtin_kind_has_a_protobuf_table() -> None:
    from lite.kinds import BUILTIN_KINDS
    from lite.server.api.protobuf_fields import ROOTS

    missing = sorted(f"{k.api_version}/{k.kind}" for k in BUILTIN_KINDS
                     if "create" in k.verbs and not k.virtual and f"{k.api_version}/{k.kind}" not in ROOTS
                     and f"{k.api_version}/{k.kind}" not in _JSON_ONLY)
    assert not missing, f"no protobuf table for {missing}: add them to gen_fields.py's ROOTS and regenerate"
