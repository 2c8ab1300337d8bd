"""The disconnect-policy annotations (`lite.lostpolicy`): parsing, admission causes, pod-over-node precedence."""

from __future__ import annotations

import pytest

from lite.lostpolicy import (
    LOST_AFTER,
    REPLACE_WHEN_LOST,
    LostPolicy,
    annotation_causes,
    bad_values,
    parse_lost_after,
    policy,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("20s", 20.0), ("5m", 300.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("300", 300.0), ("2.5", 2.5), ("0", 0.0),
    ("0s", 0.0), (" 45s ", 45.0), ("500ms", 0.5),
])
def test_lost_after_values(text: str, seconds: float) -> None:
    assert parse_lost_after(text) == seconds


@pytest.mark.parametrize(("text", "why"), [
    ("", "must be a duration"), ("soon", "must be a duration"), ("5 minutes", "must be a duration"),
    ("-5s", "must not be negative"), ("-1", "must not be negative"), ("nan", "must be a duration"),
    ("inf", "must be a duration"), ("5d", "must be a duration"),
])
def test_lost_after_refusals(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_lost_after(text)


def test_admission_causes_name_the_annotation() -> None:
    assert annotation_causes(None) == [] and annotation_causes({"other": "x"}) == []
    assert annotation_causes({LOST_AFTER: "5m", REPLACE_WHEN_LOST: "false"}) == []
    causes = annotation_causes({LOST_AFTER: "soon", REPLACE_WHEN_LOST: "no"})
    assert [(c.reason, c.field) for c in causes] == [
        ("FieldValueInvalid", "metadata.annotations[lite.dev/lost-after]"),
        ("FieldValueNotSupported", "metadata.annotations[lite.dev/replace-when-lost]")]
    assert causes[0].message == 'Invalid value: "soon": must be a duration such as 20s or 5m, or a number of seconds'
    assert causes[1].message == 'Unsupported value: "no": supported values: "true", "false"'
    assert bad_values({LOST_AFTER: "soon", REPLACE_WHEN_LOST: "true"}) == ["lite.dev/lost-after=soon"]


@pytest.mark.parametrize(("pod", "node", "want"), [
    ({}, {}, LostPolicy(None, True)),
    ({LOST_AFTER: "20s"}, {}, LostPolicy(20.0, True)),
    ({}, {LOST_AFTER: "5m"}, LostPolicy(300.0, True)),
    ({LOST_AFTER: "20s"}, {LOST_AFTER: "5m"}, LostPolicy(20.0, True)),  # the pod's wins
    ({LOST_AFTER: "bad"}, {LOST_AFTER: "5m"}, LostPolicy(300.0, True)),  # a bad pod value is ignored
    ({REPLACE_WHEN_LOST: "false"}, {}, LostPolicy(None, False)),
    ({}, {REPLACE_WHEN_LOST: "false"}, LostPolicy(None, False)),
    ({REPLACE_WHEN_LOST: "true"}, {REPLACE_WHEN_LOST: "false"}, LostPolicy(None, True)),
    ({REPLACE_WHEN_LOST: "False"}, {}, LostPolicy(None, True)),  # not a value: the default
])
def test_pod_value_else_node_value_else_default(pod: dict[str, str], node: dict[str, str], want: LostPolicy) -> None:
    assert policy(pod, node) == want
