"""The errors of `lite.cel`, apart from the runtime so that callers can name them without loading it.

Importing this module loads neither cel-expr-python nor protobuf: a caller that only catches `CelError` (the
admission-policy plugin, CRD validation) pays for the CEL runtime only once it compiles an expression.
"""

from __future__ import annotations


class CelError(Exception):
    """Base of the errors raised by this package; `str(e)` is the upstream-like message."""


class CompileError(CelError):
    """The expression does not parse or type-check (message: `ERROR: <input>:1:5: ...` with a caret line)."""


class EvalError(CelError):
    """Evaluation failed (`no such key: x`, `division by zero`, a library function's own error, ...)."""


class CostExceeded(CelError):
    """The evaluation's cost went past the per-call limit or the remaining budget."""
