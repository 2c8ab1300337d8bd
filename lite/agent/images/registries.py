"""Registry configuration in k3s `registries.yaml` form, turned into the endpoint list for one image.

```yaml
mirrors:
  docker.io:
    endpoint: ["http://mirror.local:5000", "https://backup.example"]
    rewrite: {"^(.*)$": "library/$1"}
  "*": {endpoint: [...]}            # applies to registries without their own entry
configs:
  mirror.local:5000:
    auth: {username: u, password: p}     # or auth: base64(user:pass), or identitytoken
    tls: {insecure_skip_verify: true, ca_file: /etc/ssl/ca.pem, cert_file: ..., key_file: ...}
```

Behaviour follows k3s/containerd:
- a registry's mirror endpoints are tried in the order listed, then the registry's own default endpoint
  (`https://registry-1.docker.io/v2` for docker.io, `https://<host>/v2` otherwise) as a last resort, unless
  `disable_default_endpoint` (k3s `--disable-default-registry-endpoint`) is set;
- rewrites (Go regexp syntax, `$1`) apply to mirror endpoints only, never to the default endpoint; the first
  rewrite that changes the repository wins;
- an endpoint without a scheme is https; `/v2` is appended to its path unless it already ends in `/v2`;
- credentials and TLS come from `configs[<endpoint host:port>]` (for Docker Hub any of its names:
  `docker.io`, `registry-1.docker.io`, `index.docker.io`); pull secrets (dockerconfigjson `auths`)
  that match the endpoint host take precedence, as kubelet's credentials do over the node's;
- the default endpoint of a loopback registry falls back to plain http when TLS fails (containerd does the
  same for localhost).
Pure data: nothing here does I/O except `load`, which reads one small file.
"""

from __future__ import annotations

import base64
import fnmatch
import ipaddress
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lite.agent.images.reference import DOCKER_HUB, ImageRef
from lite.records import dataclass

DOCKER_HUB_ENDPOINT = "https://registry-1.docker.io/v2"
_DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}



def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)`. Where PyYAML is not loaded yet (a `lite server` with its embedded agent: its
    other YAML users import it at first use), the parse runs in a forked child (`lite.forkcall`) that hands
    the document back as JSON, so the long-running process never maps PyYAML (~0.9 MB) for one small file
    read at start. A document JSON does not carry exactly (a key that is not a string, a date, ...) or any
    failure in the child is parsed here instead: the same result, or the same error, as `yaml.safe_load`."""
    if "yaml" not in sys.modules:
        from lite.forkcall import ChildFailed, call_in_child

        def parse() -> bytes:
            import yaml

            doc = yaml.safe_load(text)
            if not _plain(doc):
                raise ValueError("not plain JSON")
            return json.dumps(doc).encode()

        try:
            return json.loads(call_in_child(parse))
        except (ChildFailed, ValueError):
            pass
    import yaml

    return yaml.safe_load(text)


def _plain(doc: Any) -> bool:
    """Whether `doc` survives a JSON round trip unchanged (string keys; str, int, float, bool, None values)."""
    if isinstance(doc, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in doc.items())
    if isinstance(doc, list):
        return all(_plain(v) for v in doc)
    return doc is None or isinstance(doc, str | int | float)

@dataclass(frozen=True)
class Credentials:
    username: str = ""
    password: str = ""
    identity_token: str = ""  # OAuth2 refresh token, exchanged at the token realm


@dataclass(frozen=True)
class TLSConfig:
    insecure_skip_verify: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass(frozen=True)
class Endpoint:
    """One place to try: the API root (ending in /v2) and the repository name as this endpoint knows it."""

    base: str
    repository: str
    credentials: Credentials | None = None
    tls: TLSConfig = TLSConfig()
    is_default: bool = False
    http_fallback: bool = False

    @property
    def host(self) -> str:
        return urlsplit(self.base).netloc


@dataclass(frozen=True)
class Mirror:
    endpoints: tuple[str, ...] = ()
    rewrites: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class HostConfig:
    credentials: Credentials | None = None
    tls: TLSConfig = TLSConfig()


@dataclass(frozen=True)
class RegistriesConfig:
    mirrors: Mapping[str, Mirror] = field(default_factory=dict)
    configs: Mapping[str, HostConfig] = field(default_factory=dict)
    disable_default_endpoint: bool = False

    @classmethod
    def load(cls, path: Path, *, disable_default_endpoint: bool = False) -> RegistriesConfig:
        """Read a registries.yaml; a missing file means no mirrors and no configs."""
        if not path.exists():
            return cls(disable_default_endpoint=disable_default_endpoint)
        data = load_yaml(path.read_text()) or {}
        return cls.from_dict(data, disable_default_endpoint=disable_default_endpoint)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, disable_default_endpoint: bool = False) -> RegistriesConfig:
        mirrors = {
            str(name): Mirror(
                tuple(str(e) for e in (m or {}).get("endpoint") or ()),
                tuple((str(k), str(v)) for k, v in ((m or {}).get("rewrite") or {}).items()),
            )
            for name, m in (data.get("mirrors") or {}).items()
        }
        configs = {_host_key(str(h)): _host_config(c or {}) for h, c in (data.get("configs") or {}).items()}
        return cls(mirrors, configs, disable_default_endpoint)

    def endpoints(self, ref: ImageRef, pull_secrets: Sequence[Mapping[str, Any]] = ()) -> list[Endpoint]:
        """The endpoints to try for `ref`, in order."""
        mirror = self.mirrors.get(ref.registry) or self.mirrors.get("*") or Mirror()
        out: list[Endpoint] = []
        for raw in mirror.endpoints:
            base = _api_root(raw)
            out.append(self._endpoint(base, rewrite(ref.repository, mirror.rewrites), pull_secrets, False))
        default = DOCKER_HUB_ENDPOINT if ref.registry == DOCKER_HUB else f"https://{ref.registry}/v2"
        if not (mirror.endpoints and self.disable_default_endpoint) and all(e.base != default for e in out):
            ep = self._endpoint(default, ref.repository, pull_secrets, True)
            out.append(ep)
        return out

    def _endpoint(self, base: str, repository: str, secrets: Sequence[Mapping[str, Any]], is_default: bool) -> Endpoint:
        host = urlsplit(base).netloc
        keys = [host, *sorted(_DOCKER_HUB_ALIASES - {host})] if host in _DOCKER_HUB_ALIASES else [host]
        cfg = next((self.configs[k] for k in keys if k in self.configs), HostConfig())
        creds = secret_credentials(secrets, host) or cfg.credentials
        fallback = is_default and _is_loopback(host)
        return Endpoint(base, repository, creds, cfg.tls, is_default, fallback)


def rewrite(repository: str, rewrites: Iterable[tuple[str, str]]) -> str:
    """Apply the first rewrite whose regexp changes the repository (Go `ReplaceAllString` semantics)."""
    for pattern, replacement in rewrites:
        new = re.sub(pattern, _go_replacement(replacement), repository)
        if new != repository:
            return new
    return repository


def _go_replacement(repl: str) -> str:
    # Go expands $1, ${1}, $name, ${name} and $$; Python wants \g<...> and literal backslashes escaped.
    repl = repl.replace("\\", "\\\\")
    return re.sub(
        r"\$(?:\{(\w+)\}|(\w+)|(\$))",
        lambda m: "$" if m.group(3) else f"\\g<{m.group(1) or m.group(2)}>",
        repl,
    )


def _api_root(raw: str) -> str:
    url = raw if "://" in raw else f"https://{raw}"
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/v2"):
        path += "/v2"
    return f"{parts.scheme}://{parts.netloc}{path}"


def _host_key(key: str) -> str:
    return urlsplit(key).netloc if "://" in key else key.rstrip("/")


def _host_config(c: Mapping[str, Any]) -> HostConfig:
    auth = c.get("auth") or {}
    tls = c.get("tls") or {}
    creds = credentials_from(auth) if auth else None
    return HostConfig(
        creds,
        TLSConfig(
            bool(tls.get("insecure_skip_verify", False)),
            str(tls.get("ca_file") or ""),
            str(tls.get("cert_file") or ""),
            str(tls.get("key_file") or ""),
        ),
    )


def credentials_from(auth: Mapping[str, Any]) -> Credentials | None:
    """Credentials from a registries.yaml `auth` block or a dockerconfigjson `auths` entry."""
    user, password = str(auth.get("username") or ""), str(auth.get("password") or "")
    if not user and auth.get("auth"):
        decoded = base64.b64decode(str(auth["auth"])).decode()
        user, _, password = decoded.partition(":")
    token = str(auth.get("identitytoken") or auth.get("identityToken") or "")
    if not (user or password or token):
        return None
    return Credentials(user, password, token)


def secret_credentials(secrets: Sequence[Mapping[str, Any]], host: str) -> Credentials | None:
    """The first pull-secret entry (dockerconfigjson, already JSON-decoded) whose key matches `host`."""
    for secret in secrets:
        auths = secret.get("auths", secret)  # legacy .dockercfg has no "auths" wrapper
        for key, entry in auths.items():
            if isinstance(entry, Mapping) and _key_matches(str(key), host):
                creds = credentials_from(entry)
                if creds:
                    return creds
    return None


def _key_matches(key: str, host: str) -> bool:
    key_host = urlsplit(key).netloc if "://" in key else key.split("/", 1)[0]
    if key_host in _DOCKER_HUB_ALIASES and host in _DOCKER_HUB_ALIASES:
        return True
    if "*" in key_host:
        # kubelet: a glob matches one DNS label per `*`
        return len(key_host.split(".")) == len(host.split(".")) and fnmatch.fnmatchcase(host, key_host)
    return key_host == host


def _is_loopback(host: str) -> bool:
    name = urlsplit(f"//{host}").hostname or ""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
