"""PyInstaller entry point of the frozen `lite` executable: the same `main` as the console script.

Frozen, PyInstaller's bootloader puts its own library dir first in LD_LIBRARY_PATH and adds `_PYI_*` markers
to the environment; children would inherit them, so host tools lite runs (nft, umount, nsenter, ...) would
load the bundled libssl/libz/... instead of their own. The dynamic loader read LD_LIBRARY_PATH when this
process started, so removing it from os.environ changes nothing here, only what children see. A frozen child
(`lite shim ...`) gets the bootloader's settings again from its own bootloader.
"""

import os
import sys
from collections.abc import Mapping


def child_environ(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the bootloader's additions undone (LD_LIBRARY_PATH as it was before, no `_PYI_*`)."""
    out = {k: v for k, v in env.items() if not k.startswith("_PYI_") and k != "_MEIPASS2"}
    orig = out.pop("LD_LIBRARY_PATH_ORIG", None)
    if orig is not None:
        out["LD_LIBRARY_PATH"] = orig
    else:
        out.pop("LD_LIBRARY_PATH", None)
    return out


if __name__ == "__main__":
    if getattr(sys, "frozen", False):
        clean = child_environ(os.environ)
        os.environ.clear()
        os.environ.update(clean)
    from lite.cli.main import main

    sys.exit(main())
