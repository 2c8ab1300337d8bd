"""What lite adds to the runtime's type checker so that typed compilation refuses what cel-go refuses, and only
that, with cel-go's messages.

- `COMPARISON_CONFIG` / `comparison_functions()`: an environment for checking only declares `<`, `<=`, `>`,
  `>=` itself (the runtime's own are excluded), with cel-go's cross-type numeric overloads (`double > int`:
  Kubernetes enables `CrossTypeNumericComparisons`; the runtime's checker does not have them).
- `go_style(src, text)`: a checker error text as cel-go writes it: member calls as `int.(string)`,
  `undefined field 'x'` without the runtime's `not found in struct` tail, `type 'T' does not support field
  selection`, and no follow-on errors about the `*error*` type.
- `mixed_literals(src, type_of)`: cel-go's homogeneous aggregate literals (Kubernetes'
  `HomogeneousAggregateLiterals` and its AST validator): the elements of a list literal, and the keys and the
  values of a map literal, must have one type (`expected type 'int' but found 'string'`, at the element); lists
  and maps inside a `format` call's arguments are exempt. `type_of(text)` gives an element's type in cel-go's
  spelling, or None when it cannot be known alone (it uses a macro's or `cel.bind`'s variable) or involves
  `dyn`: such elements are not compared (lite may type `dyn` where cel-go knows better; never a false refusal).

Invariants: pure functions (the comparison overloads' implementations are never called: checking only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lite.cel import cost

if TYPE_CHECKING:
    from cel_expr_python import cel

_OPS = ("_<_", "_<=_", "_>_", "_>=_")
COMPARISON_CONFIG = "stdlib:\n  exclude_functions:\n" + "".join(f'    - name: "{op}"\n' for op in _OPS)
_SAME = ("BOOL", "INT", "UINT", "DOUBLE", "STRING", "BYTES", "TIMESTAMP", "DURATION")
_NUMERIC = ("INT", "UINT", "DOUBLE")


def _never(*_args: Any) -> bool:
    raise ValueError("checking only")


def comparison_functions() -> list[cel.FunctionDecl]:
    """`<`, `<=`, `>`, `>=` over each ordered type and across int, uint and double (for checking only)."""
    from cel_expr_python import cel  # the runtime, loaded with the environment that asks for these

    pairs = [(t, t) for t in _SAME] + [(a, b) for a in _NUMERIC for b in _NUMERIC if a != b]
    out = []
    for op in _OPS:
        name = op.strip("_").replace("<=", "le").replace(">=", "ge").replace("<", "lt").replace(">", "gt")
        out.append(cel.FunctionDecl(op, [
            cel.Overload(f"lite_{name}_{a.lower()}_{b.lower()}", cel.Type.BOOL,
                         [getattr(cel.Type, a), getattr(cel.Type, b)], impl=_never) for a, b in pairs]))
    return out


_BLOCK = re.compile(r"^ERROR: <input>:(\d+):(\d+): (.*)$")
_OVERLOAD = re.compile(r"^found no matching overload for '([^']+)' applied to '\((.*)\)'$")


def go_style(src: str, text: str) -> str:
    """A compile error text of the runtime (blocks of `ERROR: <input>:L:C: message` and their caret lines) as
    cel-go writes it (see the module docstring)."""
    lines = text.split("\n")
    blocks: list[list[str]] = []
    for line in lines:
        if _BLOCK.match(line) or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    out: list[list[str]] = []
    for block in blocks:
        m = _BLOCK.match(block[0])
        if m is None:
            out.append(block)
            continue
        message = m.group(3)
        if "'*error*'" in message:
            continue  # follows from an error already reported; cel-go does not repeat it
        message = re.sub(r"^(undefined field '[^']*') not found in struct '[^']*'$", r"\1", message)
        message = re.sub(r"^expression of type '(.*)' cannot be the operand of a select operation$",
                         r"type '\1' does not support field selection", message)
        over = _OVERLOAD.match(message)
        if over is not None and _is_member_call(src, int(m.group(1)), int(m.group(2)), over.group(1)):
            args = _split_types(over.group(2))
            if args:
                message = (f"found no matching overload for '{over.group(1)}' applied to "
                           f"'{args[0]}.({', '.join(args[1:])})'")
        out.append([f"ERROR: <input>:{m.group(1)}:{m.group(2)}: {message}", *block[1:]])
    if not out:
        return text
    return "\n".join(line for block in out for line in block)


def _offset(src: str, line: int, col: int) -> int:
    starts = [0] + [i + 1 for i, ch in enumerate(src) if ch == "\n"]
    return (starts[line - 1] if 0 < line <= len(starts) else 0) + col - 1


def _is_member_call(src: str, line: int, col: int, name: str) -> bool:
    """Whether the call reported at line:col (its opening parenthesis) is `receiver.name(...)`."""
    at = _offset(src, line, col)
    for c in cost.member_calls(src, (name,)):
        if c.start != c.name_start and src.find("(", c.name_start + len(name)) == at:
            return True
    return False


def _split_types(text: str) -> list[str]:
    """`int, map(string, int)` -> [`int`, `map(string, int)`]."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def go_type_name(t: Any) -> str | None:
    """A runtime type's name in cel-go's spelling (`list(int)`, `google.protobuf.Timestamp`), None when it
    involves `dyn` or a kind lite does not name."""
    name = str(t.name())
    out = _GO_NAMES.sub(lambda m: _NAMES[m.group(0)], name).replace("<", "(").replace(">", ")")
    if "dyn" in out or re.search(r"\b[A-Z_]{3,}\b", out) is not None:
        return None
    return out


_NAMES = {"BOOL": "bool", "INT": "int", "UINT": "uint", "DOUBLE": "double", "STRING": "string", "BYTES": "bytes",
          "NULL": "null_type", "TIMESTAMP": "google.protobuf.Timestamp", "DURATION": "google.protobuf.Duration",
          "DYN": "dyn", "LIST": "list", "MAP": "map", "TYPE": "type"}
_GO_NAMES = re.compile(r"\b(?:" + "|".join(sorted(_NAMES, key=len, reverse=True)) + r")\b")


def mixed_literals(src: str, type_of: Callable[[str], str | None]) -> list[tuple[int, str]]:
    """(offset, message) of each list or map literal element whose type differs from the first's (see the
    module docstring). Text lite cannot parse gives none (the runtime's compile error stands)."""
    try:
        literals = cost.aggregate_literals(src)
    except (ValueError, RecursionError):
        return []
    exempt = [span for c in cost.member_calls(src, ("format",)) if c.start != c.name_start for span in c.args]
    found: list[tuple[int, str]] = []
    for lit in literals:
        if any(a <= lit.start < b for a, b in exempt):
            continue
        groups = [lit.elements] if lit.kind == "list" else [lit.elements[0::2], lit.elements[1::2]]
        for spans in groups:
            first: str | None = None
            for i, (a, b) in enumerate(spans):
                t = type_of(src[a:b])
                if t is None:
                    if i == 0:
                        break  # the first element's type unknown: nothing to compare with
                    continue
                if first is None:
                    if i > 0:
                        break
                    first = t
                    continue
                if t != first:
                    found.append((a + root_offset(src[a:b]), f"expected type '{first}' but found '{t}'"))
                    break
    return found


_LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%"))


def root_offset(text: str) -> int:
    """Where cel-go places an expression's own position, relative to `text`: its operator (the `?` of a
    conditional, the last binary operator of the loosest precedence), else the start of a unary operator, else
    the last selection's `.`, call's `(` or index's `[`, else its first token."""
    toks = cost.tokenize(text)[:-1]
    depth = 0
    depth_toks: list[tuple[int, tuple[str, str, int, int]]] = []
    for tok in toks:
        if tok[1] in ("(", "[", "{", "[?") and tok[0] == "op":
            depth_toks.append((depth, tok))
            depth += 1
            continue
        if tok[1] in (")", "]", "}") and tok[0] == "op":
            depth -= 1
        depth_toks.append((depth, tok))
    top = [(i, t) for i, (d, t) in enumerate(depth_toks) if d == 0]
    for _i, t in top:
        if t[0] == "op" and t[1] == "?":
            return t[2]
    for ops in _LEVELS:
        best = None
        for i, t in top:
            if t[1] in ops and (t[0] == "op" or t[1] == "in") and i > 0:
                prev = depth_toks[i - 1][1]
                if t[1] == "-" and (prev[0] == "op" and prev[1] not in (")", "]", "}")):
                    continue  # a unary minus
                best = t[2]
        if best is not None:
            return best
    if top and top[0][1][1] in ("!", "-") and top[0][1][0] == "op":
        return top[0][1][2]
    if toks and toks[0][1] == "(" and len(top) == 2 and top[-1][1][1] == ")":
        inner = text[toks[0][3]:top[-1][1][2]]
        return toks[0][3] + root_offset(inner)
    last = None
    for i, t in top:
        if i == 0:
            continue
        if t[1] in (".", ".?") and t[0] == "op":
            nxt = depth_toks[i + 2][1] if i + 2 < len(depth_toks) else None
            last = nxt[2] if nxt is not None and nxt[1] == "(" else t[2]
        elif t[1] in ("[", "[?", "(") and t[0] == "op":
            prev = depth_toks[i - 1][1]
            if t[1] == "(" and prev[0] == "id" and i == 1:
                last = t[2]  # a global call
            elif t[1] != "(":
                last = t[2]
    if last is not None:
        return last
    return toks[0][2] if toks else 0
