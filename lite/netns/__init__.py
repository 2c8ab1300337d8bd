"""lite.netns: network namespaces, links, addresses and routes over netlink.

Links, addresses, routes and conntrack go through lite's own small client (`lite.netns.netlink`); only the VXLAN
parts (`lite.netns.vxlan`: multi-node clusters) use pyroute2. pyroute2's package `__init__` imports every part
of the library (IPDB, NDB, wireless, devlink, IPVS, plan9, ...: 220 modules, about 12 MB resident); its route
socket alone is about a hundred modules and 4 MB. Importing
this package registers `pyroute2` as a bare package (`lite.barepkg`) whose submodules load as usual; its
`__init__` runs only if something asks the package itself for a name (`from pyroute2 import IPRoute`), so every
use of pyroute2 keeps working. `vxlan` imports pyroute2's submodules
directly (`pyroute2.iproute.linux`, `pyroute2.netlink...`), never names from the package.

pyroute2's netlink socket module uses `unittest.mock` at import (for a mock mode lite never turns on), which
would load the whole `unittest` framework (case, loader, runner, difflib...); `unittest` is registered bare
too, so only `unittest.mock` and what it imports load (unless something asks `unittest` for a name).

Invariant: the registration happens once per process and only while `pyroute2` is not loaded yet.
"""

from __future__ import annotations

from lite.barepkg import bare_package

bare_package("pyroute2")
bare_package("unittest")  # pyroute2's netlink socket needs unittest.mock only, not the test framework (~1.5 MB)
