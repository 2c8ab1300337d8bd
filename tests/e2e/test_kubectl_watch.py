"""`kubectl get -w` as a live subprocess: every change made while it runs shows up as its own line."""

from __future__ import annotations

from e2ekit import Cluster


def test_get_watch_shows_each_change(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "w1", "-n", ns, "--from-literal=a=1")
    with cluster.kubectl_stream("get", "cm", "-n", ns, "-w", "--output-watch-events") as (proc, lines):
        lines.wait_for(lambda s: s.split()[:2] == ["EVENT", "NAME"])
        lines.wait_for(lambda s: s.split()[:2] == ["ADDED", "w1"])

        cluster.kubectl("create", "configmap", "w2", "-n", ns)
        lines.wait_for(lambda s: s.split()[:3] == ["ADDED", "w2", "0"])

        cluster.kubectl("patch", "cm", "w1", "-n", ns, "--type=merge", "-p", '{"data":{"b":"2"}}')
        lines.wait_for(lambda s: s.split()[:3] == ["MODIFIED", "w1", "2"])

        cluster.kubectl("delete", "cm", "w2", "-n", ns)
        lines.wait_for(lambda s: s.split()[:2] == ["DELETED", "w2"])
        assert proc.poll() is None, "the watch must stay open"
    events = [s.split()[:2] for s in lines.seen[1:] if s.split()[1:2] != ["kube-root-ca.crt"]]
    assert events == [["ADDED", "w1"], ["ADDED", "w2"], ["MODIFIED", "w1"], ["DELETED", "w2"]], lines.seen


def test_get_watch_plain_table(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "p0", "-n", ns)
    cluster.kubectl("label", "cm", "p0", "-n", ns, "watched=yes")
    with cluster.kubectl_stream("get", "cm", "-n", ns, "-w", "-l", "watched=yes") as (_, lines):
        lines.wait_for(lambda s: s.split()[:1] == ["p0"])  # the initial list: the watch is now open
        cluster.kubectl("create", "configmap", "p1", "-n", ns)
        cluster.kubectl("create", "configmap", "p2", "-n", ns)  # never selected: must not show
        cluster.kubectl("label", "cm", "p1", "-n", ns, "watched=yes")
        lines.wait_for(lambda s: s.split()[:1] == ["p1"])
        cluster.kubectl("annotate", "cm", "p1", "-n", ns, "x=y")
        lines.wait_for(lambda s: s.split()[:1] == ["p1"])
    assert not any(s.split()[:1] == ["p2"] for s in lines.seen), lines.seen
