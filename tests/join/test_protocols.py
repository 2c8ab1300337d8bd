"""Pure parts of the join: wire messages, SPDY framing and its dictionary, CRI log reading, pod references."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgpack
import pytest

from lite import wire
from lite.agent.streams.crilog import LogOptions, parse_line, parse_ns, read_log
from lite.kubestreams import spdy
from lite.server.join.relay import pod_refs

KUBECTL_132 = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32"


@pytest.mark.parametrize("msg", [
    wire.Hello("n1", info={"labels": {"a": "b"}}, pods={"u1": "default/p"}),
    wire.PodUpsert({"metadata": {"name": "p", "uid": "u1"}, "spec": {}}),
    wire.StreamData(7, 1, b"\x00\xffbinary"),
    wire.StreamClose(7),
    wire.Synced(["a", "b"]),
    wire.Metrics("2026-11-22T00:00:00Z", pods=[{"namespace": "d", "name": "p", "containers": []}]),
])
def test_wire_roundtrip(msg: wire.Message) -> None:
    assert wire.decode(wire.encode(msg)) == msg


def test_wire_rejects_unknown_and_incomplete_frames_and_ignores_extra_fields() -> None:
    with pytest.raises(wire.WireError):
        wire.decode(msgpack.packb({"t": "launch_missiles"}))
    with pytest.raises(wire.WireError):
        wire.decode(msgpack.packb({"t": "stream_data", "id": 1}))
    with pytest.raises(wire.WireError):
        wire.decode(b"\xc1garbage")
    with pytest.raises(wire.WireError):
        wire.decode(msgpack.packb([1, 2]))
    newer = msgpack.packb({"t": "ping", "seq": 3, "added_later": True})
    assert wire.decode(newer) == wire.Ping(3)


def test_spdy_dictionary_is_the_one_kubectl_uses() -> None:
    d = spdy.header_dictionary()
    assert len(d) == 1423
    assert d.startswith(b"\x00\x00\x00\x07options") and d.endswith(b",enq=0.")
    if not os.path.exists(KUBECTL_132):
        pytest.skip("kubectl 1.32 binary not installed: compared by length and ends only")
    data = Path(KUBECTL_132).read_bytes()
    start = data.find(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert start >= 0
    assert hashlib.sha256(data[start:start + 1423]).digest() == hashlib.sha256(d).digest()


def test_spdy_frames_survive_arbitrary_splits() -> None:
    client, server = spdy.SpdyWriter(), spdy.SpdyReader()
    stream = (client.syn_stream(1, {"streamtype": "error", "port": "80", "requestid": "0"})
              + b"".join(spdy.SpdyWriter.data(1, b"", fin=True))
              + client.syn_stream(3, {"streamtype": "data", "port": "80", "requestid": "0"})
              + b"".join(spdy.SpdyWriter.data(3, b"GET / HTTP/1.1\r\n\r\n"))
              + client.ping(1))
    frames = []
    for i in range(0, len(stream), 5):  # kubectl split one SYN_STREAM across many messages
        frames += server.feed(stream[i:i + 5])
    assert [(f.type, f.stream_id) for f in frames] == [(1, 1), (0, 1), (1, 3), (0, 3), (6, 0)]
    assert frames[0].headers == {"streamtype": "error", "port": "80", "requestid": "0"}
    assert frames[1].fin and not frames[3].fin
    assert frames[2].headers["streamtype"] == "data"  # second block decoded with the shared context
    assert frames[3].data == b"GET / HTTP/1.1\r\n\r\n" and frames[4].value == 1
    reply = spdy.SpdyReader().feed(spdy.SpdyWriter().syn_reply(3))
    assert reply[0].type == spdy.SYN_REPLY and reply[0].stream_id == 3 and reply[0].headers == {}


def test_cri_line_parsing() -> None:
    rec = parse_line(b"2026-11-22T10:00:00.123456789Z stderr P half a line")
    assert (rec.stream, rec.full, rec.message) == ("stderr", False, b"half a line")
    assert rec.ns() % 1_000_000_000 == 123456789
    assert parse_line(b"2026-11-22T10:00:00Z stdout F ").message == b""
    odd = parse_line(b"not a cri line")
    assert (odd.timestamp, odd.message, odd.full) == ("", b"not a cri line", True)
    assert parse_ns("2026-11-22T11:00:00+01:00") == parse_ns("2026-11-22T10:00:00Z")


async def _read(path: Path, **opts: object) -> bytes:
    return b"".join([c async for c in read_log(str(path), LogOptions(**opts))])  # type: ignore[arg-type]


async def test_cri_log_options(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"2026-11-22T10:00:00Z stdout F a\n2026-11-22T10:00:01Z stderr F b\n"
                    b"2026-11-22T10:00:02Z stdout P c\n2026-11-22T10:00:03Z stdout F d\n"
                    b"2026-11-22T10:00:04Z stdout F unfinished")  # no newline yet: not a record
    assert await _read(log) == b"a\nb\ncd\n"
    assert await _read(log, tail_lines=1) == b"d\n"
    assert await _read(log, tail_lines=0) == b""
    assert await _read(log, stream="Stderr") == b"b\n"
    assert await _read(log, since_ns=parse_ns("2026-11-22T10:00:01Z")) == b"b\ncd\n"
    assert await _read(log, timestamps=True, tail_lines=2) == (b"2026-11-22T10:00:02Z c"
                                                               b"2026-11-22T10:00:03Z d\n")
    assert await _read(log, limit_bytes=3) == b"a\nb"
    opts = LogOptions.from_params({"sinceSeconds": 10, "tailLines": 5, "limitBytes": 9}, now=100.0)
    assert (opts.since_ns, opts.tail_lines, opts.limit_bytes) == (90 * 10**9, 5, 9)


async def test_cri_log_follow_across_rotation(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"2026-11-22T10:00:00Z stdout F one\n")
    state = {"running": True, "step": 0}
    out: list[bytes] = []
    async for chunk in read_log(str(log), LogOptions(follow=True), lambda: bool(state["running"])):
        out.append(chunk)
        if chunk == b"one\n":
            with open(log, "ab") as f:
                f.write(b"2026-11-22T10:00:01Z stdout F two\n")
        elif chunk == b"two\n":  # rotate: the old file moves away, a new one starts
            log.rename(tmp_path / "0.log.1")
            log.write_bytes(b"2026-11-22T10:00:02Z stdout F three\n")
        elif chunk == b"three\n":
            with open(log, "ab") as f:
                f.write(b"2026-11-22T10:00:03Z stdout F last\n")
            state["running"] = False
    assert out == [b"one\n", b"two\n", b"three\n", b"last\n"]


def test_pod_refs_cover_volumes_env_projected_and_pull_secrets() -> None:
    p = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {
        "volumes": [{"name": "a", "configMap": {"name": "cm-vol"}}, {"name": "b", "secret": {"secretName": "s-vol"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "cm-proj"}},
                                                            {"secret": {"name": "s-proj"}},
                                                            {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "d", "emptyDir": {}}],
        "imagePullSecrets": [{"name": "pull"}],
        "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "cm-envfrom"}}]}],
        "containers": [{"name": "c", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
            {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
            {"name": "Z", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "envFrom": [{"secretRef": {"name": "s-envfrom"}}]}]}}
    assert pod_refs(p) == {("ConfigMap", "ns", n) for n in ("cm-vol", "cm-proj", "cm-envfrom", "cm-env")} | {
        ("Secret", "ns", n) for n in ("s-vol", "s-proj", "pull", "s-env", "s-envfrom")}
