"""Configuration files and `LITE_*` environment variables for `lite server` and `lite agent` (k3s's model).

Sources, strongest first: flags on the command line; the config file `--config FILE` (else `$LITE_CONFIG_FILE`,
else `/etc/lite/config.yaml`) and then every `*.yaml` in `<that file>.d/` in name order (a later file's key
replaces an earlier one's; a key ending in `+` appends to a list instead); `LITE_<FLAG>` environment
variables (`--node-name` ↔ `LITE_NODE_NAME`; the agent's `--server` is `LITE_URL`); the flag defaults.

Keys are the long flag names without dashes (`tls-san: [a, b]`, `disable-agent: true`,
`https-listen-port: 7443`). An unknown key, a list for a flag that takes one value, or a file that is not a
YAML mapping is a usage error naming the file and the key.

`expand(parser, argv, env)` returns the argv to parse: the subcommand, then the flags from the environment and
the files, then the user's own flags (argparse's last value wins, so the user's flags win; repeatable flags
such as `--tls-san` collect from every source).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path("/etc/lite/config.yaml")
COMMANDS = ("server", "agent")
# Variables k3s users know by another name than LITE_<FLAG> (K3S_URL for the agent's --server).
ALIASES = {("agent", "server"): "LITE_URL"}


class ConfigError(Exception):
    """A config file or environment variable lite cannot use; the message names which and why."""


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(name)
            return sub if isinstance(sub, argparse.ArgumentParser) else None
    return None


def _long_options(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """`--flag-name` → its action, for every long option but help and config."""
    out: dict[str, argparse.Action] = {}
    for action in sub._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt not in ("--help", "--config"):
                out[opt[2:]] = action
    return out


def _given(argv: Sequence[str], option: argparse.Action) -> bool:
    return any(a in option.option_strings or a.split("=", 1)[0] in option.option_strings for a in argv)


def _config_path(argv: Sequence[str], env: Mapping[str, str]) -> tuple[Path, bool]:
    """(the config file, whether the user named it: then it must exist)."""
    for i, a in enumerate(argv):
        if a in ("--config", "-c") and i + 1 < len(argv):
            return Path(argv[i + 1]), True
        if a.startswith("--config="):
            return Path(a.split("=", 1)[1]), True
    if env.get("LITE_CONFIG_FILE"):
        return Path(env["LITE_CONFIG_FILE"]), True
    return DEFAULT_CONFIG, False


def load_files(path: Path, required: bool) -> dict[str, Any]:
    """The merged mapping of `path` and `path.d/*.yaml` (see the module docstring)."""
    files = [path] if path.exists() or required else []
    drop_in = path.with_name(path.name + ".d")
    if drop_in.is_dir():
        files += sorted(drop_in.glob("*.yaml"))
    merged: dict[str, Any] = {}
    if files:
        import yaml  # only when there is a file: a server with none never loads PyYAML (~0.9 MB)
    for f in files:
        try:
            data = yaml.safe_load(f.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {f} does not exist") from None
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"config file {f}: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {f}: expected a mapping of flag names to values")
        for key, value in data.items():
            key = str(key)
            if key.endswith("+"):
                base = key[:-1]
                old = merged.get(base, [])
                merged[base] = [*(old if isinstance(old, list) else [old]),
                                *(value if isinstance(value, list) else [value])]
            else:
                merged[key] = value
    return merged


def _flags(key: str, value: Any, action: argparse.Action, origin: str) -> list[str]:
    flag = f"--{key}"
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise ConfigError(f"{origin}: {key} takes true or false, not {value!r}")
        return [flag] if value else []
    values = value if isinstance(value, list) else [value]
    if len(values) != 1 and not isinstance(action, argparse._AppendAction):
        raise ConfigError(f"{origin}: {key} takes one value, not a list")
    out = []
    for v in values:
        if isinstance(v, dict | list) or v is None:
            raise ConfigError(f"{origin}: {key} takes a plain value, not {v!r}")
        out.append(f"{flag}={str(v).lower() if isinstance(v, bool) else v}")
    return out


def expand(parser: argparse.ArgumentParser, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """argv with the file and environment settings put before the user's flags (see the module docstring)."""
    if not argv or argv[0] not in COMMANDS:
        return list(argv)
    sub = _subparser(parser, argv[0])
    if sub is None:
        return list(argv)
    options = _long_options(sub)
    rest = list(argv[1:])
    path, required = _config_path(rest, env)
    from_files = load_files(path, required)
    unknown = sorted(k for k in from_files if k not in options)
    if unknown:
        raise ConfigError(f"config file {path}: unknown key {unknown[0]!r} for lite {argv[0]} "
                          f"(keys are its flag names, e.g. {next(iter(options))})")
    extra: list[str] = []
    for key, action in options.items():
        var = ALIASES.get((argv[0], key), "LITE_" + key.upper().replace("-", "_"))
        if key in from_files or var not in env or _given(rest, action):
            continue
        raw = env[var]
        value: Any = raw.lower() in ("1", "true", "yes") if isinstance(action, argparse._StoreTrueAction) else raw
        extra += _flags(key, value, action, f"environment variable {var}")
    for key, value in from_files.items():
        if not _given(rest, options[key]) or isinstance(options[key], argparse._AppendAction):
            extra += _flags(key, value, options[key], f"config file {path}")
    return [argv[0], *extra, *rest]
