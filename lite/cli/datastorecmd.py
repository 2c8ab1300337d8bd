"""`lite datastore migrate --from URI --to URI`: copy a stopped cluster's objects between datastores; and
`lite snapshot save` on whichever datastore the server uses.

Endpoints are written as `--datastore-endpoint` takes them (`sqlite://PATH`, `postgres://...`, `http(s)://HOST:
2379[,...]`), each with TLS files of its own: `--from-cafile/--from-certfile/--from-keyfile` and
`--to-cafile/...` (the `--datastore-*` files of the server on that end). `--data-dir` is the server's data dir:
its encryption keys (`server/cred/encryption-config.json`) are needed when encrypted Secrets move into SQLite.

`lite snapshot save` takes the server's `--datastore-endpoint` and TLS flags; when the endpoint is not given it
reads them from the server's config file (`--config`, else `$LITE_CONFIG_FILE`, else /etc/lite/config.yaml,
plus its `.d/*.yaml`) and `LITE_DATASTORE_*` variables, as `lite server` would; none: the data dir's SQLite file.

Exit codes: 0 copied; 1 the copy failed or was refused (unreachable datastore, non-empty target, a key
missing), nothing or an incomplete, marked copy written; 2 a malformed endpoint or flag.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lite.server.store.endpoint import DatastoreEndpoint

FLAG_NAMES = ("endpoint", "cafile", "certfile", "keyfile")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    ds = sub.add_parser("datastore", help="move the cluster's objects between datastores")
    ds_sub = ds.add_subparsers(dest="datastore_command", metavar="SUBCOMMAND", required=True)
    mig = ds_sub.add_parser("migrate", help="copy every object from one datastore into an empty one (servers "
                            "stopped): SQLite, PostgreSQL and etcd, in any direction")
    for end, text in (("from", "the datastore to read"), ("to", "the empty datastore to write")):
        mig.add_argument(f"--{end}", required=True, metavar="URI", dest=f"{end}_endpoint",
                         help=f"{text}: sqlite://PATH, postgres://USER:PASS@HOST:PORT/DB or http(s)://HOST:2379")
        mig.add_argument(f"--{end}-cafile", default="", metavar="FILE", help="CA of its TLS certificate")
        mig.add_argument(f"--{end}-certfile", default="", metavar="FILE", help="client certificate for it")
        mig.add_argument(f"--{end}-keyfile", default="", metavar="FILE", help="key of that certificate")
    add_data_dir(mig)


def _endpoint(args: argparse.Namespace, end: str) -> DatastoreEndpoint:
    """The parsed endpoint of `--from`/`--to`; EndpointError's message names this command's flags."""
    from lite.server.store.endpoint import EndpointError, check_files, parse_endpoint

    try:
        ep = parse_endpoint(getattr(args, f"{end}_endpoint"), cafile=getattr(args, f"{end}_cafile"),
                            certfile=getattr(args, f"{end}_certfile"), keyfile=getattr(args, f"{end}_keyfile"))
        if not getattr(args, f"{end}_endpoint").strip():
            raise EndpointError(f"--{end} is empty; name a datastore")
        check_files(ep)
    except EndpointError as e:
        text = str(e)
        for name in FLAG_NAMES:
            text = text.replace(f"--datastore-{name}", f"--{end}" if name == "endpoint" else f"--{end}-{name}")
        raise EndpointError(text) from None
    return ep


def cmd_datastore(args: argparse.Namespace) -> int:
    from lite.server.config import ServerConfig
    from lite.server.datastore import DatastoreUnavailable
    from lite.server.datastoremigrate import migrate
    from lite.server.encryption import keyfile
    from lite.server.store import StoreError
    from lite.server.store.endpoint import EndpointError

    try:
        source, target = _endpoint(args, "from"), _endpoint(args, "to")
    except EndpointError as e:
        print(f"lite datastore migrate: {e}", file=sys.stderr)
        return 2
    cred = ServerConfig.create(args.data_dir).paths.cred
    try:
        keyset = keyfile.load(cred) if target.kind == "sqlite" else None
    except keyfile.KeyFileError as e:
        print(f"lite datastore migrate: {e}", file=sys.stderr)
        return 1
    keys = keyset.keys if keyset is not None else ()
    try:
        report = asyncio.run(migrate(source, target, keys, str(Path(cred) / keyfile.FILE)))
    except (StoreError, DatastoreUnavailable, OSError) as e:
        print(f"lite datastore migrate: {e}", file=sys.stderr)
        return 1
    revs = f"revisions {report.first_rev}-{report.last_rev}" if report.keys else "no objects"
    print(f"migrated {report.keys} object(s) ({report.bytes} bytes) from {source.display} (revision "
          f"{report.source_rev}) to {target.display} ({revs}) in {report.seconds:.1f}s")
    print(f"start lite server with --datastore-endpoint {target.display} (and the same --token or data dir)")
    return 0


DATASTORE_FLAGS = ("datastore-endpoint", "datastore-cafile", "datastore-certfile", "datastore-keyfile")


def add_datastore_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, metavar="FILE",
                   help="the server's config file, read for its datastore-* settings when --datastore-endpoint "
                        "is not given (default $LITE_CONFIG_FILE, else /etc/lite/config.yaml)")
    p.add_argument("--datastore-endpoint", default=None, metavar="URI",
                   help="the server's datastore (default: the config file's, else the data dir's SQLite file); "
                        "PostgreSQL: an SQLite snapshot; etcd: etcd's own snapshot")
    for name, text in (("cafile", "CA of the datastore's TLS certificate"),
                       ("certfile", "client certificate for the datastore"), ("keyfile", "its key")):
        p.add_argument(f"--datastore-{name}", default=None, metavar="FILE", help=text)


def server_datastore(args: argparse.Namespace, env: dict[str, str]) -> dict[str, str]:
    """The server's datastore flags: the command line's, else its config files', else LITE_DATASTORE_*."""
    from lite.cli.configfile import _config_path, load_files

    given = {name: getattr(args, name.replace("-", "_")) for name in DATASTORE_FLAGS}
    if given["datastore-endpoint"] is not None:
        return {name: value or "" for name, value in given.items()}
    argv = ["--config", args.config] if args.config else []
    path, required = _config_path(argv, env)
    files = load_files(path, required)
    out = {}
    for name in DATASTORE_FLAGS:
        value = given[name] if given[name] is not None else files.get(name, env.get(
            "LITE_" + name.upper().replace("-", "_"), ""))
        out[name] = str(value)
    return out


def snapshot_save(args: argparse.Namespace, data_dir: Path) -> int:
    """`lite snapshot save` (see the module docstring)."""
    import os

    from lite.cli.configfile import ConfigError
    from lite.server import snapshots as snaps
    from lite.server.encryption import keyfile
    from lite.server.store.endpoint import EndpointError, check_files, parse_endpoint

    try:
        flags = server_datastore(args, dict(os.environ))
        endpoint = parse_endpoint(flags["datastore-endpoint"], cafile=flags["datastore-cafile"],
                                  certfile=flags["datastore-certfile"], keyfile=flags["datastore-keyfile"])
        check_files(endpoint)
    except (ConfigError, EndpointError) as e:
        print(f"lite snapshot: {e}", file=sys.stderr)
        return 2
    cred = data_dir / "server" / "cred"
    try:
        keyset = keyfile.load(cred) if endpoint.kind == "postgres" else None
        s = asyncio.run(snaps.save_datastore(data_dir, endpoint, args.name, keys=keyset.keys if keyset else (),
                                             keys_from=str(cred / keyfile.FILE)))
    except (snaps.SnapshotError, keyfile.KeyFileError, OSError) as e:
        print(f"lite snapshot: {e}", file=sys.stderr)
        return 1
    print(f"saved snapshot {s.name} ({s.size} bytes) to {s.path}")
    if endpoint.kind == "etcd":
        print("it is etcd's own snapshot: restore it with `etcdutl snapshot restore FILE --data-dir DIR` "
              "(etcdctl before etcd 3.5) and start etcd on DIR")
    elif endpoint.kind == "postgres":
        print(f"restore it into an empty database with `lite datastore migrate --from sqlite://{s.path} --to "
              "postgres://...`")
    return 0
