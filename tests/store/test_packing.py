"""packing: the store's in-memory form of values (pure; table-tested)."""

from __future__ import annotations

import base64
import random
import zlib

import orjson
import pytest

from lite.server.store import packing

POD = orjson.dumps({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "0b7c6a1e-3f0e-4d55-9a53-5c1b0d9c2f11",
                 "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "terminationMessagePath": "/dev/termination-log",
                             "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
             "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
             "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
             "schedulerName": "default-scheduler", "enableServiceLinks": True,
             "preemptionPolicy": "PreemptLowerPriority"},
    "status": {"phase": "Pending", "qosClass": "BestEffort"},
})
NOISE = orjson.dumps({"data": {"blob": base64.b64encode(random.Random(1).randbytes(3000)).decode()}})


@pytest.mark.parametrize(("value", "packed"), [
    (POD, True),  # a typical object: deflated
    (b'{"a":1}', False),  # shorter than MIN_SIZE: kept plain
    (NOISE, True),  # random data still gains a little (base64's 6 bits a byte)
    (b"{}", False),
    ("{" + "\u00e9" * 100 + "}", True),  # non-ASCII JSON (as str for the table; encoded below)
])
def test_round_trip(value: bytes | str, packed: bool) -> None:
    raw = value.encode() if isinstance(value, str) else value
    got = packing.pack(raw)
    assert packing.is_packed(got) is packed
    assert packing.unpack(got) == raw
    assert len(got) <= len(raw)


def test_typical_pod_packs_to_a_small_fraction() -> None:
    """The preset dictionary is what makes a small object small: deflate without it keeps far more."""
    assert len(packing.pack(POD)) < len(POD) / 3
    assert len(packing.pack(POD)) < 0.75 * len(zlib.compress(POD, packing.LEVEL, -15))


def test_plain_values_pass_through_unchanged() -> None:
    """Callers mix packed and plain values (pending writes are plain): unpack returns a plain one as is."""
    assert packing.unpack(POD) is POD
    assert packing.unpack(b"") == b""
    assert packing.pack(b"[1,2,3]" * 20) == b"[1,2,3]" * 20  # not an object: never packed
    assert packing.unpack(packing.pack(POD))[:1] == b"{"
    assert packing.pack(POD)[:1] == bytes([packing.TAG])


# A FailedScheduling Event as the scheduler's events.k8s.io recorder has it stored: one per unschedulable pod
# (upstream's too), so a cluster with thousands of Pending pods stores thousands of them.
FAILED_SCHEDULING = orjson.dumps({
    "apiVersion": "v1", "kind": "Event",
    "metadata": {"name": "web-0.18ee62bbf7b60068", "namespace": "shop", "uid": "110ceaac-1ffe-481a-b4cd-b514fc3c5ff2",
                 "creationTimestamp": "2026-12-05T14:44:20Z", "resourceVersion": "184"},
    "eventTime": "2026-12-05T14:44:20.821713Z", "reportingComponent": "default-scheduler",
    "reportingInstance": "default-scheduler-vm", "action": "Scheduling", "reason": "FailedScheduling",
    "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-0",
                       "uid": "8632daaa-638a-487d-ab6a-f1d1b7d093e8", "apiVersion": "v1", "resourceVersion": "176"},
    "message": "no nodes available to schedule pods", "type": "Warning",
})


def test_scheduler_event_packs_to_under_a_third() -> None:
    """The dictionary carries the scheduler's event vocabulary (measured: 235 bytes without it, 182 with)."""
    got = packing.pack(FAILED_SCHEDULING)
    assert len(got) < len(FAILED_SCHEDULING) / 3
    assert packing.unpack(got) == FAILED_SCHEDULING


def test_pack_from_the_primed_compressor_is_what_a_fresh_one_writes() -> None:
    """`pack` copies a compressor that loaded the dictionary once: its output is byte for byte a fresh
    compressor's, however many values were packed before (the primed one is never fed)."""
    def fresh(value: bytes) -> bytes:
        c = zlib.compressobj(packing.LEVEL, zlib.DEFLATED, packing.WBITS, packing.MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY,
                             packing.ZDICT)
        return bytes([packing.TAG]) + c.compress(value) + c.flush()

    for value in (POD, NOISE, POD, orjson.dumps({"kind": "ConfigMap", "data": {"k": "v" * 500}}), POD):
        assert packing.pack(value) == fresh(value)
        assert packing.unpack(packing.pack(value)) == value
