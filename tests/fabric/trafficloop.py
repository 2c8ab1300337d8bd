"""A client that loops on one URL, a fresh connection per request, until told to stop, then prints its counts
(not a test module). Run with `python trafficloop.py URL STOPFILE`; it prints one JSON line
{"ok": N, "failed": N, "errors": {message: count}} when STOPFILE exists."""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main(url: str, stop: str) -> None:
    ok, errors = 0, dict[str, int]()
    while not os.path.exists(stop):
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                r.read()
            ok += 1
        except Exception as e:  # every failure counts; the message says which kind
            key = f"{type(e).__name__}: {e}"[:120]
            errors[key] = errors.get(key, 0) + 1
    print(json.dumps({"ok": ok, "failed": sum(errors.values()), "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
