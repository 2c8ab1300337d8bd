"""Store failures as Kubernetes `Status` errors: a full disk, a failed commit, a closed store.

Role: `store_faults()` wraps the registry's write verbs (`Resources`), so the HTTP layer and the in-process
controllers see the same `ApiError`; `api_error` is the pure, table-tested mapping.

Choice of code for a full disk: kube-apiserver passes etcd's "mvcc: database space exceeded" through
unconverted, which its error writer turns into a 500 with an empty reason (the case it logs as "not an
metav1.Status"). lite answers 507 Insufficient Storage with reason `InsufficientStorage` instead, as issue 7
asks: still a 5xx, so clients treat it as upstream's (kubectl prints it, client-go does not retry it without
Retry-After), but the code, the reason and the message say what is wrong: the store is full, writes are
refused, reads and watches go on. Other commit failures stay 500 InternalError with the cause in the message;
a store that is shutting down is 503 ServiceUnavailable.

Invariant: only errors raised after a write was submitted are mapped; KeyExists/KeyNotFound/RevMismatch are
handled by the verbs themselves and pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lite.errors import ApiError
from lite.server.store import CommitFailed, StoreClosed, StoreError, StoreFull

INSUFFICIENT_STORAGE = 507


def api_error(err: StoreError) -> ApiError | None:
    """The Status error for a store failure of a write, or None if the verb handles `err` itself."""
    if isinstance(err, StoreFull):
        return ApiError(f"{err}; free space on that disk and retry", INSUFFICIENT_STORAGE, "InsufficientStorage")
    if isinstance(err, CommitFailed):
        return ApiError(f"{err}; nothing of this write was stored, retry it", 500, "InternalError")
    if isinstance(err, StoreClosed):
        return ApiError(f"the server is shutting down and no longer accepts writes ({err})", 503,
                        "ServiceUnavailable")
    return None


@contextmanager
def store_faults() -> Iterator[None]:
    """Turn store failures raised inside the block into their Status errors (see `api_error`)."""
    try:
        yield
    except StoreError as e:
        mapped = api_error(e)
        if mapped is None:
            raise
        raise mapped from e
