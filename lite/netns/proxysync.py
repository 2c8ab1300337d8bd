"""Keeps one nftables table equal to a desired `nftstate.Table`, one transaction per sync.

Role: the OS half of the service proxy's syncer. It remembers what it last applied and sends only the
difference (`nftstate.transaction`) as a single libnftables buffer.

Invariants:
- At most one transaction per `sync`, and none when nothing changed; the kernel applies it whole or not at all.
- On first use (and after any failed transaction, when what the kernel holds is no longer known for sure) the
  table is read back from the kernel and reconciled: a table left by a previous agent is never flushed;
  unchanged services keep answering throughout, stale chains and elements are removed.
- Calls must not overlap (the proxier runs one sync at a time).
"""

from __future__ import annotations

from lite.netns import nftstate
from lite.netns.nftables import AsyncNft, NftError
from lite.netns.nftstate import Table


class TableSyncer:
    def __init__(self, nft: AsyncNft, family: str = "ip", name: str = "lite") -> None:
        self._nft = nft
        self.family = family
        self.name = name
        self._applied: Table | None = None
        self._known = False
        self.transactions = 0  # applied so far (for metrics and tests)
        self.last_commands = 0  # lines of the last transaction

    @property
    def nft(self) -> AsyncNft:
        """The libnftables context this table is written through (an agent shares one between its tables)."""
        return self._nft

    async def read(self) -> Table | None:
        """The table as the kernel holds it now (chain rules unknown), or None if there is none."""
        try:
            items = await self._nft.json(f"list table {self.family} {self.name}")
        except NftError as exc:
            if "No such file or directory" in exc.message:
                return None
            raise
        return nftstate.from_json(items, self.family, self.name)

    async def sync(self, desired: Table) -> bool:
        """Make the kernel table equal `desired`; True if a transaction was sent."""
        if (desired.family, desired.name) != (self.family, self.name):
            raise ValueError(f"this syncer owns table {self.family} {self.name}, not {desired.ref}")
        if not self._known:
            self._applied = await self.read()
            self._known = True
        commands = nftstate.transaction(self._applied, desired)
        if not commands:
            return False
        try:
            await self._nft.run(commands)
        except BaseException:
            self._known = False  # a refused or interrupted batch: re-read before the next attempt
            raise
        self._applied = desired
        self.transactions += 1
        self.last_commands = commands.count("\n")
        return True

    def close(self) -> None:
        """Release the libnftables context (the table stays in the kernel; so do other tables sharing it, whose
        syncers can no longer write)."""
        self._nft.close()

    async def delete(self) -> bool:
        """Remove the whole table (uninstall, tests); True if it existed."""
        self._known = False
        if await self.read() is None:
            return False
        await self._nft.run(f"delete table {self.family} {self.name}")
        return True
