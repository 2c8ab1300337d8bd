"""The one-transaction diff between two nftables tables, and reading a table back from JSON (pure, no OS)."""

from __future__ import annotations

from lite.netns.nftstate import Chain, Set, Table, from_json, transaction

KEY = "ipv4_addr . inet_proto . inet_service"


def table(chains: dict[str, Chain] | None = None, sets: dict[str, Set] | None = None) -> Table:
    return Table("ip", "lite", chains or {}, sets or {})


BASE = {
    "out": Chain(("jump svc",), "type nat hook output priority -100 ; policy accept ;"),
    "svc": Chain(("goto ep-a",)),
    "ep-a": Chain(("meta l4proto tcp dnat to 10.42.0.2:80",)),
}
IPS = Set(KEY, "verdict", elements={"10.43.0.10 . tcp . 80": "goto svc"})


def lines(buffer: str) -> list[str]:
    return buffer.splitlines()


def test_identical_tables_need_no_transaction() -> None:
    assert transaction(table(BASE, {"ips": IPS}), table(BASE, {"ips": IPS})) == ""


def test_from_nothing_declares_everything_before_using_it() -> None:
    out = lines(transaction(None, table(BASE, {"ips": IPS})))
    assert out[0] == "add table ip lite"
    assert "add chain ip lite out { type nat hook output priority -100 ; policy accept ; }" in out
    assert out.index("add chain ip lite svc") < out.index("add rule ip lite out jump svc")
    assert out.index(f"add map ip lite ips {{ type {KEY} : verdict ; }}") < out.index(
        "add element ip lite ips { 10.43.0.10 . tcp . 80 : goto svc }"
    )
    assert not any(line.startswith(("flush", "delete")) for line in out)


def test_a_changed_chain_is_flushed_and_refilled_alone() -> None:
    new = {**BASE, "svc": Chain(("numgen random mod 2 vmap { 0 : goto ep-a, 1 : goto ep-b }",)), "ep-b": BASE["ep-a"]}
    out = lines(transaction(table(BASE, {"ips": IPS}), table(new, {"ips": IPS})))
    assert out == [
        "add table ip lite",
        "add chain ip lite ep-b",
        "flush chain ip lite svc",
        "add rule ip lite svc numgen random mod 2 vmap { 0 : goto ep-a, 1 : goto ep-b }",
        "add rule ip lite ep-b meta l4proto tcp dnat to 10.42.0.2:80",
    ]


def test_a_removed_chain_is_flushed_first_and_deleted_after_its_references() -> None:
    old = table(
        {**BASE, "svc2": Chain(("goto ep-a",))},
        {"ips": Set(KEY, "verdict", elements={**IPS.elements, "10.43.0.11 . udp . 53": "goto svc2"})},
    )
    out = lines(transaction(old, table(BASE, {"ips": IPS})))
    assert out == [
        "add table ip lite",
        "flush chain ip lite svc2",
        "delete element ip lite ips { 10.43.0.11 . udp . 53 : goto svc2 }",
        "delete chain ip lite svc2",
    ]


def test_an_element_whose_verdict_changes_is_replaced() -> None:
    new = Set(KEY, "verdict", elements={"10.43.0.10 . tcp . 80": "goto reject-chain"})
    out = lines(transaction(table(BASE, {"ips": IPS}), table(BASE, {"ips": new})))
    assert out[1:] == [
        "delete element ip lite ips { 10.43.0.10 . tcp . 80 : goto svc }",
        "add element ip lite ips { 10.43.0.10 . tcp . 80 : goto reject-chain }",
    ]


def test_plain_set_elements_are_added_and_removed() -> None:
    old = Set("ipv4_addr", elements={"10.99.0.1": "", "10.99.0.2": ""})
    new = Set("ipv4_addr", elements={"10.99.0.2": "", "10.99.0.3": ""})
    out = lines(transaction(table(sets={"ips": old}), table(sets={"ips": new})))
    assert out[1:] == ["delete element ip lite ips { 10.99.0.1 }", "add element ip lite ips { 10.99.0.3 }"]


def test_dynamic_sets_are_kept_and_recreated_only_when_their_timeout_changes() -> None:
    aff = Set("ipv4_addr", timeout=10800)
    assert transaction(table(sets={"aff": aff}), table(sets={"aff": Set("ipv4_addr", timeout=10800)})) == ""
    out = lines(transaction(table(sets={"aff": aff}), table(sets={"aff": Set("ipv4_addr", timeout=60)})))
    assert out[1:] == [
        "delete set ip lite aff",
        "add set ip lite aff { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }",
    ]


def test_many_elements_are_split_over_several_commands() -> None:
    big = Set(KEY, "verdict", elements={f"10.43.{i // 256}.{i % 256} . tcp . 80": "drop" for i in range(2500)})
    out = lines(transaction(table(sets={"m": Set(KEY, "verdict")}), table(sets={"m": big})))
    assert len(out) == 4 and all(line.startswith("add element ip lite m {") for line in out[1:])
    assert sum(line.count(" : drop") for line in out) == 2500


JSON = [
    {"metainfo": {"version": "1.0.6"}},
    {"table": {"family": "ip", "name": "lite", "handle": 1}},
    {
        "map": {
            "family": "ip",
            "name": "ips",
            "table": "lite",
            "type": ["ipv4_addr", "inet_proto", "inet_service"],
            "map": "verdict",
            "elem": [
                [{"concat": ["10.43.0.10", "tcp", 80]}, {"goto": {"target": "svc"}}],
                [{"concat": ["10.43.0.11", "udp", 53]}, {"drop": None}],
            ],
        }
    },
    {"set": {"family": "ip", "name": "nodes", "table": "lite", "type": "ipv4_addr", "elem": ["10.99.0.1"]}},
    {
        "set": {
            "family": "ip",
            "name": "aff",
            "table": "lite",
            "type": "ipv4_addr",
            "flags": ["timeout"],
            "timeout": 10800,
            "elem": [{"elem": {"val": "10.42.0.7", "timeout": 10800, "expires": 10000}}],
        }
    },
    {"chain": {"family": "ip", "table": "lite", "name": "svc", "handle": 2}},
    {
        "chain": {
            "family": "ip",
            "table": "lite",
            "name": "out",
            "type": "nat",
            "hook": "output",
            "prio": -100,
            "policy": "accept",
        }
    },
    {"rule": {"family": "ip", "table": "lite", "chain": "svc", "expr": []}},
]


def test_from_json_reads_elements_exactly_and_rules_as_unknown() -> None:
    got = from_json(JSON, "ip", "lite")
    assert got is not None
    assert got.chains == {"svc": Chain(None), "out": Chain(None, BASE["out"].hook)}
    assert got.sets["ips"] == Set(
        KEY, "verdict", elements={"10.43.0.10 . tcp . 80": "goto svc", "10.43.0.11 . udp . 53": "drop"}
    )
    assert got.sets["nodes"] == Set("ipv4_addr", elements={"10.99.0.1": ""})
    assert got.sets["aff"] == Set("ipv4_addr", timeout=10800)
    assert from_json(JSON, "ip", "other") is None


def test_reconciling_a_read_back_table_refills_wanted_chains_and_drops_the_rest() -> None:
    got = from_json(JSON, "ip", "lite")
    want = table(
        {"out": BASE["out"], "svc": BASE["svc"], "ep-a": BASE["ep-a"]},
        {"ips": IPS, "nodes": Set("ipv4_addr", elements={"10.99.0.1": ""}), "aff": Set("ipv4_addr", timeout=10800)},
    )
    out = lines(transaction(got, want))
    assert "flush chain ip lite svc" in out and "flush chain ip lite out" in out
    assert "add chain ip lite out { type nat hook output priority -100 ; policy accept ; }" not in out
    assert "delete element ip lite ips { 10.43.0.11 . udp . 53 : drop }" in out
    assert not any("nodes" in line or "aff" in line for line in out)
    assert transaction(got, want) != "" and transaction(want, want) == ""
