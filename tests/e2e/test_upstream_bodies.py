"""Bodies written as upstream writes them, checked with the clients that depend on the exact bytes: the
official Python client's `create_from_yaml` (which quotes an error `Status` verbatim), kubectl and Go-shaped
timestamps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from e2ekit import Cluster
from kubernetes import utils


def test_create_from_yaml_quotes_the_status_as_upstream_writes_it(cluster: Cluster, ns: str,
                                                                   tmp_path: Path) -> None:
    doc = tmp_path / "cm.yaml"
    doc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "twice", "namespace": ns}, "data": {"a": "b"}}))
    utils.create_from_yaml(cluster.api, str(doc))
    with pytest.raises(utils.FailToCreateError) as raised:
        utils.create_from_yaml(cluster.api, str(doc))
    # Go's field order (details before code) and the JSON encoder's trailing newline, byte for byte
    assert str(raised.value) == (
        'Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"configmaps \\"twice\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"twice","kind":"configmaps"},"code":409}\n')
