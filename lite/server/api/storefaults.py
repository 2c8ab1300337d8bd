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

from types import TracebackType

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


class _StoreFaults:
    """The context manager `store_faults` returns (stateless: one instance serves every block). A class, not a
    generator-based one: it wraps every write, and a generator costs a frame and its setup on each."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, StoreError):
            mapped = api_error(exc)
            if mapped is not None:
                raise mapped from exc
        # anything else (or nothing) goes on as it was


_STORE_FAULTS = _StoreFaults()


def store_faults() -> _StoreFaults:
    """Turn store failures raised inside the block into their Status errors (see `api_error`)."""
    return _STORE_FAULTS
