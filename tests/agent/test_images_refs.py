"""Pure parts: image reference normalisation and registries.yaml → endpoint lists (k3s semantics)."""

from __future__ import annotations

import pytest

from lite.agent.images.errors import InvalidImageNameError
from lite.agent.images.manifests import select_platform
from lite.agent.images.reference import ImageRef, parse
from lite.agent.images.registries import Credentials, RegistriesConfig, rewrite

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("busybox", ImageRef("docker.io", "library/busybox", "latest")),
        ("busybox:1.36", ImageRef("docker.io", "library/busybox", "1.36")),
        ("bitnami/nginx", ImageRef("docker.io", "bitnami/nginx", "latest")),
        ("index.docker.io/library/alpine:3", ImageRef("docker.io", "library/alpine", "3")),
        ("host:5000/ns/img:tag", ImageRef("host:5000", "ns/img", "tag")),
        ("localhost/img", ImageRef("localhost", "img", "latest")),
        ("registry.k8s.io/pause:3.9", ImageRef("registry.k8s.io", "pause", "3.9")),
        (f"busybox@{D}", ImageRef("docker.io", "library/busybox", None, D)),
        (f"host:5000/a/b:v1@{D}", ImageRef("host:5000", "a/b", "v1", D)),
        ("127.0.0.1:5000/test/busybox", ImageRef("127.0.0.1:5000", "test/busybox", "latest")),
    ],
)
def test_parse(image: str, expected: ImageRef) -> None:
    ref = parse(image)
    assert ref == expected
    assert parse(str(ref)) == ref


def test_str_and_reference() -> None:
    assert str(parse("busybox")) == "docker.io/library/busybox:latest"
    ref = parse(f"host:5000/a/b:v1@{D}")
    assert ref.reference == D and ref.with_digest(D) == f"host:5000/a/b@{D}"


@pytest.mark.parametrize(
    "bad", ["", "upper/Case", "Busybox", "busybox:", "a//b", "busybox@sha256:xyz", " busybox", "x:bad tag"]
)
def test_invalid(bad: str) -> None:
    with pytest.raises(InvalidImageNameError):
        parse(bad)


def test_default_endpoint_after_mirrors_and_rewrites_only_on_mirrors() -> None:
    cfg = RegistriesConfig.from_dict(
        {
            "mirrors": {
                "docker.io": {
                    "endpoint": ["http://mirror.local:5000", "backup.example/prefix"],
                    "rewrite": {"^library/(.*)$": "hub/$1"},
                }
            }
        }
    )
    eps = cfg.endpoints(parse("busybox"))
    assert [(e.base, e.repository, e.is_default) for e in eps] == [
        ("http://mirror.local:5000/v2", "hub/busybox", False),
        ("https://backup.example/prefix/v2", "hub/busybox", False),
        ("https://registry-1.docker.io/v2", "library/busybox", True),
    ]
    no_default = RegistriesConfig(cfg.mirrors, cfg.configs, disable_default_endpoint=True)
    assert not any(e.is_default for e in no_default.endpoints(parse("busybox")))
    # a registry without mirrors always has its own default endpoint, even with the default disabled
    (only,) = no_default.endpoints(parse("quay.io/a/b"))
    assert only.base == "https://quay.io/v2" and only.is_default and not only.http_fallback


def test_wildcard_mirror_and_loopback_fallback() -> None:
    cfg = RegistriesConfig.from_dict({"mirrors": {"*": {"endpoint": ["https://cache.local"]}}})
    eps = cfg.endpoints(parse("ghcr.io/o/r:1"))
    assert [e.base for e in eps] == ["https://cache.local/v2", "https://ghcr.io/v2"]
    (local,) = RegistriesConfig().endpoints(parse("127.0.0.1:5000/x"))
    assert local.http_fallback and local.base == "https://127.0.0.1:5000/v2"


def test_configs_credentials_and_tls() -> None:
    cfg = RegistriesConfig.from_dict(
        {
            "mirrors": {"docker.io": {"endpoint": ["https://m1.local", "https://m2.local:8443"]}},
            "configs": {
                "m1.local": {"auth": {"username": "u", "password": "p"}, "tls": {"insecure_skip_verify": True}},
                "m2.local:8443": {"auth": {"auth": "YWxpY2U6cHc="}, "tls": {"ca_file": "/ca.pem"}},
                "registry-1.docker.io": {"auth": {"identitytoken": "tok"}},
            },
        }
    )
    m1, m2, hub = cfg.endpoints(parse("busybox"))
    assert m1.credentials == Credentials("u", "p") and m1.tls.insecure_skip_verify
    assert m2.credentials == Credentials("alice", "pw") and m2.tls.ca_file == "/ca.pem"
    assert hub.credentials == Credentials(identity_token="tok")


def test_docker_hub_configs_under_any_of_its_names() -> None:
    cfg = RegistriesConfig.from_dict({"configs": {"docker.io": {"auth": {"username": "hub", "password": "pw"}}}})
    (hub,) = cfg.endpoints(parse("busybox"))
    assert hub.host == "registry-1.docker.io" and hub.credentials == Credentials("hub", "pw")


def test_pull_secrets_take_precedence_and_match_docker_hub_aliases() -> None:
    cfg = RegistriesConfig.from_dict({"configs": {"registry-1.docker.io": {"auth": {"username": "node"}}}})
    secret = {"auths": {"https://index.docker.io/v1/": {"username": "pod", "password": "x"}}}
    (hub,) = cfg.endpoints(parse("busybox"), [secret])
    assert hub.credentials == Credentials("pod", "x")
    glob = {"auths": {"*.example.com": {"username": "g", "password": "y"}}}
    (ep,) = cfg.endpoints(parse("reg.example.com/a"), [glob])
    assert ep.credentials == Credentials("g", "y")
    (ep,) = cfg.endpoints(parse("a.reg.example.com/a"), [glob])
    assert ep.credentials is None  # a glob label matches exactly one DNS label


def test_rewrite_go_syntax() -> None:
    assert rewrite("library/busybox", [("^library/(.*)$", "mirror/${1}-x")]) == "mirror/busybox-x"
    assert rewrite("busybox", [("^(.*)$", "library/$1")]) == "library/busybox"
    assert rewrite("a/b", [("^zzz$", "no"), ("^a/(?P<rest>.*)$", "z/$rest")]) == "z/b"


def test_select_platform() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:" + "0" * 64, "size": 1, "platform": {"os": "unknown", "architecture": "unknown"}},
            {
                "digest": "sha256:" + "1" * 64,
                "size": 1,
                "platform": {"os": "linux", "architecture": "arm", "variant": "v6"},
            },
            {
                "digest": "sha256:" + "2" * 64,
                "size": 1,
                "platform": {"os": "linux", "architecture": "arm", "variant": "v7"},
            },
            {
                "digest": "sha256:" + "3" * 64,
                "size": 1,
                "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
            },
            {"digest": "sha256:" + "4" * 64, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert select_platform(index, "amd64").digest.endswith("4" * 64)
    assert select_platform(index, "arm", "v7").digest.endswith("2" * 64)
    assert select_platform(index, "arm64").digest.endswith("3" * 64)
