"""Which parts of its JSON variables an expression can read, and those parts alone (to convert less to CEL).

The runtime converts a variable's value into CEL values the first time an evaluation reads it, the whole value
at once: a Pod with defaults costs several microseconds where the expressions read three fields. `reads(src,
names)` walks lite's parse of `src` (`cost.parse`) and gives, per variable of `names`, the field paths the
expression selects from it (`object.spec.containers` and `has(object.metadata.labels)` give `spec.containers`
and `metadata.labels`) as a `Paths` tree; `project(value, paths)` keeps only those subtrees of the value.

Invariants: pure. Evaluating the expression over the projected values gives the same result (value or error)
as over the whole ones: a variable used in any way but as the root of a selection chain (bare, indexed at its
root, passed to a function, bound or shadowed by a macro variable of the same name) is read whole (`None`);
each selected path keeps its whole subtree (indexes, `has()` and everything else apply to the kept value),
except one only measured (`size(x)`, `x.size()`), which keeps every element of a list (each cut to what else is
read of it, `{}` when nothing), a map or a string whole; a path that meets a value that is not a map keeps
that value whole (selection on it errors as before); a path absent from the value stays absent. Text lite
cannot parse reads every variable whole.
"""

from __future__ import annotations

from typing import Any

from lite.cel import cost

# A field-path tree: field name (or `*`: each element of a list) -> subtree; None reads the whole value there.
Paths = dict[str, "Paths | None"]
# Macros whose variable stands for each element of their target and whose result exposes no element as it is
# (`filter` does: its elements are read whole). `map(x, [p,] t)` exposes `t`, which is tracked.
_ELEMENT_MACROS = ("all", "exists", "exists_one", "existsOne", "map")
_WHOLE: Any = object()


def reads(src: str, names: tuple[str, ...]) -> dict[str, Paths | None]:
    """Pure: per variable of `names`, what `src` may read of it (`{}`: nothing; None: all of it)."""
    out: dict[str, Paths | None] = {n: {} for n in names}
    try:
        node = cost.parse(src)
    except (ValueError, RecursionError, IndexError):
        return {n: None for n in names}

    def add(name: str, path: list[str]) -> None:
        tree = out[name]
        if tree is None:
            return
        if not path:
            out[name] = None
            return
        for i, key in enumerate(path):
            if key in tree and tree[key] is None:
                return  # a shorter path already keeps the whole subtree
            if i == len(path) - 1:
                tree[key] = None
                return
            nxt = tree.setdefault(key, {})
            assert nxt is not None
            tree = nxt

    def ensure(name: str, path: list[str]) -> None:
        tree = out[name]
        for key in path:
            if tree is None:
                return
            if key not in tree:
                tree[key] = {}
            tree = tree[key]

    def visit(n: Any, scope: dict[str, tuple[str, list[str]]]) -> None:
        """`scope`: identifier -> (variable, path of it that the identifier stands for)."""
        if isinstance(n, list):
            for x in n:
                visit(x, scope)
            return
        if not isinstance(n, tuple) or not n:
            return
        chain = _chain(n)
        if chain is not None and chain[0] in scope:
            var, prefix = scope[chain[0]]
            add(var, prefix + chain[1:])  # used bare or selected: that much of it, whole
            return
        if n[0] == "call" and n[1] == "size" and len(n[3]) == (0 if n[2] is not None else 1):
            size_of = _chain(n[2] if n[2] is not None else n[3][0])
            if size_of is not None and size_of[0] in scope:  # its length alone: each element or key, not content
                var, prefix = scope[size_of[0]]
                ensure(var, prefix + size_of[1:] + ["*"])
                return
        if n[0] == "call" and n[1] in _ELEMENT_MACROS and isinstance(n[3], list) and len(n[3]) in (2, 3) \
                and n[3][0][0] == "id" and (n[1] == "map" or len(n[3]) == 2):
            target = _chain(n[2]) if n[2] is not None else None
            inner = {k: v for k, v in scope.items() if k != n[3][0][1]}  # the macro variable shadows
            if target is not None and target[0] in scope:
                var, prefix = scope[target[0]]
                inner[n[3][0][1]] = (var, prefix + target[1:] + ["*"])
                ensure(var, prefix + target[1:] + ["*"])  # every element counts, even if none is read
            else:
                visit(n[2], scope)
            visit(n[3][1:], inner)
            return
        if n[0] == "sel":
            visit(n[1], scope)
            return
        for x in n[1:]:
            visit(x, scope)

    visit(node, {n: (n, []) for n in names})
    return out


def _chain(n: Any) -> list[str] | None:
    """[identifier, field, field, ...] of a selection chain rooted at an identifier (the identifier alone
    included), else None."""
    path: list[str] = []
    while isinstance(n, tuple) and n and n[0] == "sel":
        path.append(str(n[2]))
        n = n[1]
    if isinstance(n, tuple) and n and n[0] == "id":
        return [str(n[1]), *path[::-1]]
    return None


def project(value: Any, paths: Paths | None) -> Any:
    """Pure: `value` with only the subtrees `paths` names (shared with `value`, not copied); a list whose
    elements alone are read (`*`) keeps every element, each projected."""
    if paths is None:
        return value
    if isinstance(value, list):
        sub = paths.get("*", _WHOLE) if len(paths) == 1 else None
        if sub is _WHOLE:
            return value
        return [project(e, sub) for e in value]
    if not isinstance(value, dict) or "*" in paths:
        return value  # a map's comprehension reads its keys: the map as it is
    out: dict[str, Any] = {}
    for key, sub in paths.items():
        if key in value:
            out[key] = project(value[key], sub)
    return out
