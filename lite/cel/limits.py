"""Upstream's CEL limits (k8s.io/apiserver/pkg/apis/cel/config.go), apart from the runtime so that callers can
name them without loading cel-expr-python (see `errors.py`)."""

from __future__ import annotations

PER_CALL_LIMIT = 1_000_000
RUNTIME_CEL_COST_BUDGET = 10_000_000
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000
MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
