"""CEL validation rules of CustomResourceDefinitions (`x-kubernetes-validations`), compiled and evaluated.

`check_crd(crd)` is the CRD-time half (upstream's apiextensions validation): every rule and messageExpression
compiles, also against the CEL types of its schema (lite.cel.schematypes: operand types, undefined fields,
mixed list/map literals, a bool rule and a string messageExpression; `oldSelf` an optional with
`optionalOldSelf`), `reason` is one of the four supported, `fieldPath` names a field of the schema,
`optionalOldSelf` only on rules using `oldSelf`, and the estimated costs stay within upstream's limits (per rule x
its cardinality: 10,000,000; all rules of a schema: 100,000,000), each refusal a cause with upstream's path and
text.

`build(schema)` compiles a version's rules once into a `Node` tree mirroring the schema (`None` when the schema
has no rule); `Node.validate(obj, old)` is the write-time half (upstream's schema/cel Validator): rules run at
every level where the value is present, with `self`; transition rules (using `oldSelf`) run only where an old
value correlates (object properties and additionalProperties unless `x-kubernetes-map-type: atomic`, items of
`x-kubernetes-list-type: map` lists by their keys, the root), or always with `optionalOldSelf` (then `oldSelf` is
an optional); a failure gives one cause per rule (`message`, else `messageExpression`, else `failed rule: <rule>`;
`reason` picks the cause type; `fieldPath` extends the path); the per-request cost budget is charged per
evaluation (lite.cel's runtime estimate) and its exhaustion stops validation with upstream's cause. Errors of
rules that do not use `oldSelf` are ratcheted: dropped when the value equals its correlated old value.

Invariants: pure apart from the compiled programs it holds; never mutates the objects; a `Node` is immutable
after `build` and shared by all requests of one CRD revision.
"""

from __future__ import annotations

import base64
import datetime
import re
from dataclasses import field
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from lite import cel
from lite.cel import cost as celcost
from lite.cel import schematypes
from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.goduration import go_duration
from lite.records import dataclass
from lite.server.api.strategies.crschema import has_rules

Schema = dict[str, Any]
REASONS = ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"]
_CHEAP = 1000  # rules estimated at most this much are charged their estimate, not re-estimated per value
_ROOT_META = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 253}, "generateName": {"type": "string", "maxLength": 253}}}
_NOT_BOOL = "cel expression must evaluate to a bool"
_OLD, _HAS_OLD = "__lite_old_self", "__lite_has_old_self"
_PROBE = "__lite_probe"


def environment() -> cel.Environment:
    return cel.Environment({"self": cel.DYN, "oldSelf": cel.DYN, _OLD: cel.DYN, _HAS_OLD: cel.BOOL})


@dataclass
class Rule:
    index: int
    rule: str
    message: str
    reason: str
    field_path: str
    program: cel.Program
    message_program: cel.Program | None
    uses_old: bool
    optional_old: bool
    source: str = ""  # the compiled text (wrapped in cel.bind for optionalOldSelf)

    def error_string(self) -> str:
        return self.message.strip() if self.message else self.rule.strip()


@dataclass
class Node:
    schema: Schema
    type: str
    env: cel.Environment
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, Node] = field(default_factory=dict)
    items: Node | None = None
    additional: Node | None = None
    map_keys: tuple[str, ...] | None = None  # items of an `x-kubernetes-list-type: map` list correlate by these
    correlates: bool = True  # object/map values pair with old values (not `x-kubernetes-map-type: atomic`)
    view: bool = False  # rules see some value under this node converted (cel_view: `__namespace__`, ...)
    root: bool = False  # the root of a resource: rules see apiVersion, kind, metadata.name/generateName only
    rules_new: list[Rule] = field(default_factory=list)  # the rules that run where no old value correlates
    # All rules of the node (with / without an old value) compiled as one list expression: the C++ runtime is
    # entered once per node instead of once per rule; None for a single rule.
    batch_old: cel.Program | None = None
    batch_new: cel.Program | None = None
    # The summed static costs of the rules when each is at most _CHEAP (charged at once), else None.
    cheap_old: int | None = None
    cheap_new: int | None = None
    # A list whose items have cheap rules: `self.map(i, [rules of i])`, for items with no old item.
    items_batch: cel.Program | None = None
    # Rules that do not compile (a CRD stored before lite checked what it checks now): each value they apply to
    # is refused with upstream's "rule compile error" rather than passed unchecked.
    broken: list[str] = field(default_factory=list)

    def validate(self, obj: Any, old: Any, budget: cel.Budget | None = None) -> list[Cause]:
        """Causes for every rule of this tree `obj` fails (`old`: the stored object on updates, else None)."""
        causes: list[Cause] = []
        self._walk(obj, old, "", budget or cel.Budget(), causes)
        return causes

    def _walk(self, value: Any, old: Any, path: str, budget: cel.Budget, causes: list[Cause],
              rules: bool = True) -> bool:
        if value is None:
            return True
        if rules and self.broken:
            causes.extend(field_invalid(path or "<nil>", self.type, f"rule compile error: {e}") for e in self.broken)
        if rules and self.rules and not self._run_rules(value, old, path, budget, causes):
            return False
        if isinstance(value, list) and self.items is not None:
            olds = _correlate(self.map_keys, old) if self.map_keys is not None and isinstance(old, list) else None
            # items with no old item to pair with: their rules run in one evaluation over the whole list
            batched = olds is None and self.items_batch is not None and len(value) > 1 and \
                self._run_items_batch(value, path, budget, causes)
            for i, item in enumerate(value):
                prev = olds.get(_key_of(self.map_keys, item)) if olds is not None and self.map_keys else None
                if not self.items._walk(item, prev, f"{path}[{i}]", budget, causes, not batched):
                    return False
        elif isinstance(value, dict):
            olddict = old if isinstance(old, dict) and self.correlates else None
            for key, item in value.items():
                sub = self.properties.get(key)
                if sub is not None:
                    sub_path = f"{path}.{key}" if path else key
                elif self.additional is not None and not (not path and key in ("apiVersion", "kind", "metadata")):
                    sub, sub_path = self.additional, f"{path}[{key}]"
                else:
                    continue
                if not sub._walk(item, olddict.get(key) if olddict is not None else None, sub_path, budget, causes):
                    return False
        return True

    def _run_rules(self, value: Any, old: Any, path: str, budget: cel.Budget, causes: list[Cause]) -> bool:
        shown_path = path or "<nil>"
        if self.root:
            value, old = _root_view(value), _root_view(old)
        raw_value, raw_old = value, old
        if self.view:
            value = _view(value, self.schema)
            old = _view(old, self.schema) if old is not None else None
        data: dict[str, Any] = {"self": value, _HAS_OLD: old is not None}
        if old is not None:
            data["oldSelf"] = data[_OLD] = old
        try:
            act = self.env.activation(data)
        except cel.EvalError as exc:
            causes.append(field_invalid(shown_path, self.type, str(exc)))
            return True
        rules, batch = (self.rules, self.batch_old) if old is not None else (self.rules_new, self.batch_new)
        cheap = self.cheap_old if old is not None else self.cheap_new
        if cheap is not None and cheap <= budget.remaining:
            budget.remaining -= cheap  # every rule cheap (below the per-call limit): one charge for all
            rules_to_charge: list[Rule] = []
        else:
            rules_to_charge = rules
        for r in rules_to_charge:  # charged for every rule before any runs (the batch runs them at once)
            cost = r.program.estimated_cost.max
            if cost > _CHEAP:
                cost = r.program.runtime_cost({"self": cel.Shape(self.schema, values=[raw_value]),
                                               "oldSelf": cel.Shape(self.schema, values=[raw_old])})
            try:
                budget.charge(cost)
            except cel.CostExceeded as exc:
                if "actual cost limit" in str(exc):
                    msg = (f"'{exc}': no further validation rules will be run due to call cost exceeds limit "
                           f"for rule: {r.error_string()}")
                else:
                    msg = str(exc)
                causes.append(field_invalid(shown_path, self.type, msg))
                return False
        results: Any = None
        if batch is not None:
            try:
                results = batch.eval(act)
            except cel.CelError:
                results = None  # some rule fails to evaluate: run them one by one for their own errors
        for i, r in enumerate(rules):
            if results is not None:
                ok = results[i]
            else:
                try:
                    ok = r.program.eval(act)
                except cel.EvalError as exc:
                    if "no matching overload" in str(exc).lower():
                        causes.append(field_invalid(shown_path, self.type, f"'no such overload': call arguments "
                                                    f"did not match a supported operator, function or macro "
                                                    f"signature for rule: {r.error_string()}"))
                    else:
                        causes.append(field_invalid(shown_path, self.type,
                                                    f"{exc} evaluating rule: {r.error_string()}"))
                    continue
            if ok is True:
                continue
            if not r.uses_old and old is not None and old == value:
                continue  # ratcheting: an unchanged value keeps passing
            self._fail(r, act, path, budget, causes)
        return True

    def _fail(self, r: Rule, act: cel.Activation, path: str, budget: cel.Budget, causes: list[Cause]) -> None:
        detail = self._message(r, act, budget)
        err_path = path
        if r.field_path:
            err_path = (f"{path}.{r.field_path}" if path else r.field_path) if not r.field_path.startswith("[") \
                else f"{path}{r.field_path}"
        causes.append(_cause(err_path or "<nil>", self.type, detail, r.reason))

    def _run_items_batch(self, items: list[Any], path: str, budget: cel.Budget, causes: list[Cause]) -> bool:
        """The rules of every item of a list with no old items, in one evaluation over the list; False when
        that cannot decide (some rule fails to evaluate, or the budget is short): walk the items one by one."""
        node, batch = self.items, self.items_batch
        if node is None or batch is None or node.cheap_new is None:
            return False
        cost = node.cheap_new * len(items)
        if cost > budget.remaining:
            return False
        try:
            results = batch.eval(self.env.activation({"self": items, _HAS_OLD: False}))
        except cel.CelError:
            return False
        budget.remaining -= cost
        for i, (item, oks) in enumerate(zip(items, results, strict=True)):
            if all(ok is True for ok in oks):
                continue
            act = self.env.activation({"self": item, _HAS_OLD: False})
            for r, ok in zip(node.rules_new, oks, strict=True):
                if ok is not True:
                    node._fail(r, act, f"{path}[{i}]", budget, causes)
        return True

    def _message(self, r: Rule, act: cel.Activation, budget: cel.Budget) -> str:
        if r.message_program is not None:
            try:
                out = r.message_program.eval(act, budget)
            except cel.CelError:
                out = None
            if isinstance(out, str) and out.strip() and "\n" not in out.strip() and len(out.strip()) <= 5 * 1024:
                return out.strip()
        return r.message.strip() if r.message else f"failed rule: {r.error_string()}"


def _root_view(obj: Any) -> Any:
    """A resource as its root rules see it (upstream: of metadata only name and generateName)."""
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    view = {k: v for k, v in obj.items() if k != "metadata"}
    view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return view


_TYPED_FORMATS = ("date-time", "date", "duration", "byte")


def _needs_view(schema: Any) -> bool:
    """Whether rules see some value under `schema` differently from its JSON: an escaped property name, a
    `number` (a double even when written as an integer), a string of format date-time/date (timestamp),
    duration or byte (bytes)."""
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "number" or (schema.get("type") == "string" and schema.get("format") in _TYPED_FORMATS):
        return True
    props = schema.get("properties")
    if isinstance(props, dict) and any(celcost.escape(k) != k for k in props):
        return True
    subs = [*(props.values() if isinstance(props, dict) else []), schema.get("items"),
            schema.get("additionalProperties")]
    return any(_needs_view(sub) for sub in subs)


def cel_view(value: Any, schema: Any) -> Any:
    """`value` as rules see it (upstream's UnstructuredToVal): property names escaped (`namespace` ->
    `__namespace__`, `a-b` -> `a__dash__b`; properties that cannot be escaped left out), numbers as doubles,
    date-time/date strings as timestamps, duration strings as durations, byte strings as bytes (a value that
    does not parse stays a string). A copy only where something changes; `value` is never mutated."""
    if not isinstance(schema, dict) or not _needs_view(schema):
        return value
    return _view(value, schema)


def _view(value: Any, schema: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [_view(v, items) for v in value]
    if not isinstance(value, dict):
        return _scalar(value, schema)
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k in props:
            name = celcost.escape(k)
            if name is not None:
                out[name] = _view(v, props[k])
        else:
            out[k] = _view(v, extra) if isinstance(extra, dict) else v
    return out


def _scalar(value: Any, schema: Schema) -> Any:
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    fmt = schema.get("format")
    if not isinstance(value, str) or schema.get("type") != "string" or fmt not in _TYPED_FORMATS:
        return value
    try:
        if fmt == "byte":
            return base64.b64decode(value, validate=True)
        if fmt == "duration":
            out = duration_pb2.Duration()
            out.FromTimedelta(go_duration(value))
            return out
        if fmt == "date-time":
            when = datetime.datetime.fromisoformat(value)
        else:
            when = datetime.datetime.combine(datetime.date.fromisoformat(value), datetime.time(), datetime.UTC)
        stamp = timestamp_pb2.Timestamp()  # the runtime takes protobuf well-known types, not datetime
        stamp.FromDatetime(when if when.tzinfo else when.replace(tzinfo=datetime.UTC))
        return stamp
    except (ValueError, OverflowError):
        return value


def _cause(path: str, type_: str, detail: str, reason: str) -> Cause:
    if reason == "FieldValueForbidden":
        return field_forbidden(path, detail)
    if reason == "FieldValueRequired":
        return field_required(path, f"Required value: {detail}")
    if reason == "FieldValueDuplicate":
        return field_duplicate(path, type_)
    return field_invalid(path, type_, detail)


def _key_of(keys: tuple[str, ...], item: Any) -> tuple[Any, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(repr(item.get(k)) for k in keys)


def _correlate(keys: tuple[str, ...] | None, old: list[Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for item in old:
        k = _key_of(keys or (), item)
        if k is not None:
            out.setdefault(k, item)
    return out


# ---- compile -------------------------------------------------------------------------------------------


@dataclass
class _Ctx:
    env: cel.Environment
    causes: list[Cause]
    costs: list[tuple[int, str]]  # (cost x cardinality, rule path)
    report: bool
    broken: list[str] = field(default_factory=list)  # compile errors of the node being built
    # type-checking environments by the CEL type of `self` (schematypes), None where one cannot be built
    typed: dict[Any, cel.Environment | None] = field(default_factory=dict)


def _typed_env(ctx: _Ctx, schema: Schema, root: bool) -> cel.Environment | None:
    """An environment where `self` and `oldSelf` have the CEL type of `schema` (upstream's declared types),
    to type-check rules with; None when the schema exposes no type (rules then stay checked as dyn only)."""
    decl = schematypes.decl_type(schema, root)
    if decl is None:
        return None
    if decl in ctx.typed:
        return ctx.typed[decl]
    decls = schematypes.Declarations()
    t = decls.cel_type(decl)
    probe = decls.probe()
    variables = {"self": t, "oldSelf": t, _OLD: t, _HAS_OLD: cel.BOOL}
    if probe is not None:
        variables[_PROBE] = cel.Type(probe[0])
    try:
        env: cel.Environment | None = cel.Environment(variables, messages=decls.files(), checking=True)
        # the runtime drops message types it finds invalid (and would then refuse every rule): make sure not
        if env is not None and probe is not None:
            env.check(f"has({_PROBE}.{probe[1]})")
    except (cel.CompileError, RuntimeError, TypeError, ValueError):
        env = None  # a type protobuf cannot declare: left to the dyn compile
    ctx.typed[decl] = env
    return env


def _typed_check(ctx: _Ctx, schema: Schema, root: bool, src: str, optional_old: bool) -> Any:
    """Type-check `src` against the schema's types: its result type (None when it cannot be typed), or
    CompileError with cel-go's text (operand types, undefined fields, mixed list and map literals)."""
    env = _typed_env(ctx, schema, root)
    if env is None:
        return None
    if not optional_old:
        result = env.check(src)
    else:  # oldSelf an optional: the rule inside the same cel.bind as it runs, errors placed back in `src`
        wrapped = _optional_old_source(src)
        shift = wrapped.index(f", ({src}))") + 3
        try:
            result = env.check(wrapped)
        except cel.CompileError as exc:
            raise cel.CompileError(_shifted(str(exc), src, shift)) from None

    def type_of(text: str) -> str | None:
        if optional_old and "oldSelf" in text:
            return None
        try:
            return cel.go_type_name(env.check(text))
        except cel.CompileError:
            return None
    mixed = cel.mixed_literals(src, type_of)
    if mixed:
        raise cel.CompileError("\n".join(cel.issue(src, at, msg) for at, msg in mixed))
    return result


def _shifted(text: str, src: str, shift: int) -> str:
    """Errors of a text that holds `src` at offset `shift` (one line), as errors of `src` itself."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"^ERROR: <input>:1:(\d+): (.*)$", line)
        if m is not None:
            at = int(m.group(1)) - 1 - shift
            out.append(cel.issue(src, min(max(at, 0), max(len(src) - 1, 0)), m.group(2)))
    return "\n".join(out) or text


def _type_of(schema: Schema) -> str:
    return str(schema.get("type") or "")


def _uses_old_self(src: str) -> bool:
    try:
        found = _ids(cel.parse(src))
    except (ValueError, RecursionError):
        return re.search(r"\boldSelf\b", src) is not None
    return "oldSelf" in found


def _ids(node: Any) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple) and n:
            if n[0] == "id":
                out.add(n[1])
            else:
                stack.extend(n[1:])
        elif isinstance(n, list):
            stack.extend(n)
    return out


def _go_rule(rule: dict[str, Any]) -> str:
    """The ValidationRule as upstream's field.Invalid prints it (Go's %#v of the internal type)."""
    reason = rule.get("reason")
    opt = rule.get("optionalOldSelf")
    return ("apiextensions.ValidationRule{" + f"Rule:{_goq(rule.get('rule'))}, Message:{_goq(rule.get('message'))}, "
            f"MessageExpression:{_goq(rule.get('messageExpression'))}, Reason:"
            + ("(*apiextensions.FieldValueErrorReason)(nil)" if reason is None else f"\"{reason}\"")
            + f", FieldPath:{_goq(rule.get('fieldPath'))}, OptionalOldSelf:"
            + ("(*bool)(nil)" if opt is None else str(bool(opt)).lower()) + "}")


def _goq(v: Any) -> str:
    s = "" if v is None else str(v)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def normalize_field_path(path: str, schema: Schema) -> str:
    """`fieldPath` (`.a.b`, `['x.y']`) checked against `schema` and written as the error path suffix
    (`a.b`, `[x.y]`); raises ValueError with upstream's reason when it names no field."""
    out = ""
    tokens = re.findall(r"\.|\[|\]|'(?:\\.|[^'\\])*'|[^.\[\]']+", path)
    i = 0
    cur = schema

    def step(name: str) -> None:
        nonlocal cur, out
        props = cur.get("properties")
        if isinstance(props, dict) and props:
            if name not in props:
                raise ValueError("does not refer to a valid field")
            cur = props[name]
            out = f"{out}.{name}" if out else name
        elif isinstance(cur.get("additionalProperties"), dict):
            cur = cur["additionalProperties"]
            out = f"{out}[{name}]"
        else:
            raise ValueError("does not refer to a valid field")

    while i < len(tokens):
        tok = tokens[i]
        if tok == ".":
            if i + 1 >= len(tokens):
                raise ValueError("unexpected end of JSON path")
            step(tokens[i + 1])
            i += 2
        elif tok == "[":
            if i + 2 >= len(tokens) or not tokens[i + 1].startswith("'") or tokens[i + 2] != "]":
                raise ValueError("expected single quoted string")
            step(tokens[i + 1][1:-1].replace("\\'", "'").replace("\\\\", "\\"))
            i += 3
        else:
            raise ValueError(f"expected [ or . but got: {tok}")
    return out


def _compile_rules(schema: Schema, path: str, bound: int | None, ctx: _Ctx, root: bool,
                   uncorrelatable: str | None = None) -> list[Rule]:
    rules = schema.get("x-kubernetes-validations")
    if not isinstance(rules, list):
        return []
    node_schema = _with_root_fields(schema) if root else schema
    cardinality = bound if bound is not None else celcost.max_cardinality(node_schema)

    def sizes(_var: str) -> cel.Shape:
        return cel.Shape(node_schema)
    out: list[Rule] = []
    for i, raw in enumerate(rules):
        rpath = f"{path}.x-kubernetes-validations[{i}]"
        if not isinstance(raw, dict):
            continue
        src = str(raw.get("rule") or "")
        if not src.strip():
            ctx.causes.append(field_required(f"{rpath}.rule", "Required value: rule is not specified"))
            continue
        reason = raw.get("reason")
        if reason is not None and reason not in REASONS:
            ctx.causes.append(field_not_supported(f"{rpath}.reason", reason, REASONS))
        message = str(raw.get("message") or "")
        if message and not message.strip():
            ctx.causes.append(field_invalid(f"{rpath}.message", message, "message must be non-empty if specified"))
        elif "\n" in message.strip():
            ctx.causes.append(field_invalid(f"{rpath}.message", message, "message must not contain line breaks"))
        fpath = ""
        if raw.get("fieldPath"):
            try:
                fpath = normalize_field_path(str(raw["fieldPath"]), node_schema)
            except ValueError as exc:
                ctx.causes.append(field_invalid(f"{rpath}.fieldPath", raw["fieldPath"], f"fieldPath must be a valid "
                                                f"path: {exc}" if "valid field" not in str(exc) else str(exc)))
        uses_old = _uses_old_self(src)
        optional_old = bool(raw.get("optionalOldSelf"))
        if optional_old and not uses_old:
            ctx.causes.append(field_forbidden(f"{rpath}.optionalOldSelf",
                                              "may not be set if rule does not use oldSelf"))
        if uses_old and uncorrelatable is not None:
            ctx.causes.append(field_invalid(f"{rpath}.rule", src, "oldSelf cannot be used on the uncorrelatable "
                                            f"portion of the schema within {uncorrelatable}"))
        try:
            program = ctx.env.compile(src, sizes=sizes)
            undefined = undefined_fields(src, node_schema)
            if undefined:
                raise cel.CompileError("\n".join(cel.issue(src, at, msg) for at, msg in undefined))
            result, allowed = program.result_type(), [cel.BOOL, cel.DYN]
            if ctx.report:  # at CRD create/update: checked against the schema's types, as upstream compiles
                typed = _typed_check(ctx, schema, root, src, optional_old)
                if typed is not None:  # typed: a bool, not a dyn (an int-or-string is not a rule)
                    result, allowed = typed, [cel.BOOL]
            if result not in allowed:
                raise cel.CompileError(_NOT_BOOL)
            if optional_old:
                program = _optional_old(ctx.env, src, program)
        except cel.CompileError as exc:
            detail = str(exc) if str(exc) == _NOT_BOOL else f"compilation failed: {exc}"
            ctx.causes.append(Cause("FieldValueInvalid", f"Invalid value: {_go_rule(raw)}: {detail}",
                                    f"{rpath}.rule"))
            ctx.broken.append(detail)
            continue
        mprogram = None
        if raw.get("messageExpression"):
            if message:
                pass  # both may be set; messageExpression wins when it evaluates
            try:
                mprogram = ctx.env.compile(str(raw["messageExpression"]), sizes=sizes)
                mresult, mallowed = mprogram.result_type(), [cel.STRING, cel.DYN]
                if ctx.report:
                    mtyped = _typed_check(ctx, schema, root, str(raw["messageExpression"]), optional_old)
                    if mtyped is not None:
                        mresult, mallowed = mtyped, [cel.STRING]
                if mresult not in mallowed:
                    raise cel.CompileError("must evaluate to a string")
                if optional_old:
                    mprogram = _optional_old(ctx.env, str(raw["messageExpression"]), mprogram)
            except cel.CompileError as exc:
                ctx.causes.append(Cause("FieldValueInvalid", f"Invalid value: {_go_rule(raw)}: messageExpression "
                                        f"compilation failed: {exc}", f"{rpath}.messageExpression"))
        cost = program.estimated_cost.max * cardinality
        if cost > cel.STATIC_ESTIMATED_COST_LIMIT:
            ctx.causes.append(field_forbidden(f"{rpath}.rule", cel.cost_error_message(
                "estimated rule cost", cost, cel.STATIC_ESTIMATED_COST_LIMIT)))
        ctx.costs.append((cost, f"{rpath}.rule"))
        if mprogram is not None:
            mcost = mprogram.estimated_cost.max * cardinality
            if mcost > cel.STATIC_ESTIMATED_COST_LIMIT:
                ctx.causes.append(field_forbidden(f"{rpath}.messageExpression", cel.cost_error_message(
                    "estimated messageExpression cost", mcost, cel.STATIC_ESTIMATED_COST_LIMIT)))
            ctx.costs.append((mcost, f"{rpath}.messageExpression"))
        out.append(Rule(i, src, message, str(reason or "FieldValueInvalid"), fpath, program, mprogram, uses_old,
                        optional_old, _optional_old_source(src) if optional_old else src))
    return out


_ONE_VAR = {"all", "exists", "exists_one", "map", "filter"}
_TWO_VAR = {"all", "exists", "existsOne", "transformList", "transformMap", "transformMapEntry"}


def _with_root_fields(schema: Schema) -> Schema:
    return {**schema, "properties": {**(schema.get("properties") or {}), "apiVersion": {"type": "string"},
                                     "kind": {"type": "string"}, "metadata": _ROOT_META}}


def _closed(schema: Any) -> bool:
    """An object schema whose fields are all declared: selecting another is a compile error upstream."""
    return isinstance(schema, dict) and bool(schema.get("properties")) and \
        schema.get("additionalProperties") in (None, False) and \
        not schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("x-kubernetes-int-or-string")


def _field(schema: Any, name: str) -> Any:
    if not isinstance(schema, dict):
        return None
    sub = (schema.get("properties") or {}).get(celcost.unescape(name))
    if isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource"):
        return _with_root_fields(sub)
    return sub


def _element(schema: Any) -> tuple[Any, Any]:
    """(key-or-index schema, value schema) of iterating a list or map schema (None: unknown)."""
    if not isinstance(schema, dict):
        return None, None
    items, extra = schema.get("items"), schema.get("additionalProperties")
    if isinstance(items, dict):
        elem = _with_root_fields(items) if items.get("x-kubernetes-embedded-resource") else items
        return {"type": "integer"}, elem
    if isinstance(extra, dict):
        return {"type": "string"}, extra
    return None, None


def undefined_fields(src: str, self_schema: Schema) -> list[tuple[int, str]]:
    """(offset, message) of each selection in `src` of a field its object schema does not declare (upstream's
    type-checker: `undefined field 'x'`). Only objects whose fields are all declared are checked; anything
    lite's parser cannot follow (calls' results, ternaries, dyn values) is left alone."""
    try:
        tree = celcost.parse(src)
    except (ValueError, RecursionError):
        return []
    found: list[tuple[int, str]] = []

    def walk(n: Any, scope: dict[str, Any]) -> Any:
        if not isinstance(n, tuple) or not n:
            return None
        kind = n[0]
        if kind == "id":
            return scope.get(n[1])
        if kind == "sel":
            base = walk(n[1], scope)
            if _closed(base) and celcost.unescape(n[2]) not in base["properties"]:
                found.append((n[3], f"undefined field '{n[2]}'"))
                return None
            return _field(base, n[2])
        if kind == "idx":
            walk(n[2], scope)
            return _element(walk(n[1], scope))[1]
        if kind in ("list", "map"):
            for e in n[1]:
                walk(e, scope)
            return None
        if kind == "op":
            for e in n[2]:
                walk(e, scope)
            return None
        if kind == "lit":
            return None
        name, target, args = n[1], n[2], n[3]
        if target == ("id", "cel") and name == "bind" and len(args) == 3 and args[0][0] == "id":
            return walk(args[2], {**scope, args[0][1]: walk(args[1], scope)})
        if target is not None and args and args[0][0] == "id":
            two = len(args) >= 3 and args[1][0] == "id" and name in _TWO_VAR and \
                (name not in ("map", "filter"))
            if two or name in _ONE_VAR:
                over = walk(target, scope)
                key, value = _element(over)
                is_list = isinstance(over, dict) and isinstance(over.get("items"), dict)
                inner = {**scope, args[0][1]: key, args[1][1]: value} if two else \
                    {**scope, args[0][1]: value if is_list else key}
                for a in args[2 if two else 1:]:
                    walk(a, inner)
                return None
        if target is not None:
            walk(target, scope)
        for a in args:
            walk(a, scope)
        return None

    walk(tree, {"self": self_schema, "oldSelf": self_schema})
    return found


def _optional_old_source(src: str) -> str:
    return f"cel.bind(oldSelf, {_HAS_OLD} ? optional.of({_OLD}) : optional.none(), ({src}))"


def _cheap(rules: list[Rule]) -> int | None:
    costs = [r.program.estimated_cost.max for r in rules]
    return sum(costs) if all(c <= _CHEAP for c in costs) else None


def _batch(env: cel.Environment, rules: list[Rule]) -> cel.Program | None:
    if len(rules) < 2:
        return None
    try:
        return env.compile("[" + ", ".join(f"({r.source})" for r in rules) + "]")
    except cel.CompileError:
        return None  # (each rule compiled alone; they are then run one by one)


def _optional_old(env: cel.Environment, src: str, checked: cel.Program) -> cel.Program:
    """`oldSelf` as an optional: the rule bound inside `cel.bind`, the old value passed beside `self`."""
    wrapped = env.compile(_optional_old_source(src))
    return cel.Program(src, wrapped._expr, env, checked.estimated_cost, checked.node)


def _times(cardinality: int | None, schema: Schema, key: str) -> int | None:
    """The cardinality beneath a list (`maxItems`) or map (`maxProperties`): the product of the declared bounds
    of it and its ancestors, or None (unbounded) as soon as one of them declares none."""
    bound = schema.get(key)
    if cardinality is None or not isinstance(bound, int):
        return None
    return cardinality * max(bound, 0)


def _build(schema: Schema, path: str, cardinality: int | None, ctx: _Ctx, root: bool,
           uncorrelatable: str | None = None) -> Node | None:
    """`cardinality`: how often values of `schema` can occur in one object, from the maxItems/maxProperties of
    the enclosing lists and maps, or None when one of them is unbounded (then each rule is multiplied by how many
    values of its schema fit in a request, as upstream does).
    `uncorrelatable`: the schema path of the nearest enclosing list or map whose members have no old value
    to pair with (atomic and set lists, atomic maps): transition rules beneath it are refused, as upstream."""
    if not isinstance(schema, dict):
        return None
    ctx.broken = []
    node = Node(schema, _type_of(schema), ctx.env,
                _compile_rules(schema, path, cardinality, ctx, root, uncorrelatable))
    node.broken = ctx.broken
    below = uncorrelatable
    if below is None and schema.get("x-kubernetes-map-type") == "atomic":
        below = path
    props = schema.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            child = _build(sub, f"{path}.properties[{key}]", cardinality, ctx, bool(
                isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource")), below)
            if child is not None:
                node.properties[key] = child
    items = schema.get("items")
    if isinstance(items, dict):
        listed = below if below is not None or schema.get("x-kubernetes-list-type") == "map" else path
        node.items = _build(items, f"{path}.items", _times(cardinality, schema, "maxItems"), ctx,
                            bool(items.get("x-kubernetes-embedded-resource")), listed)
        if schema.get("x-kubernetes-list-type") == "map":
            node.map_keys = tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        node.additional = _build(extra, f"{path}.additionalProperties",
                                 _times(cardinality, schema, "maxProperties"), ctx,
                                 bool(extra.get("x-kubernetes-embedded-resource")), below)
    node.correlates = schema.get("x-kubernetes-map-type") != "atomic"
    node.view = bool(node.rules) and _needs_view(schema)
    node.root = root and bool(node.rules)
    node.rules_new = [r for r in node.rules if not r.uses_old or r.optional_old]
    node.batch_old, node.batch_new = _batch(ctx.env, node.rules), _batch(ctx.env, node.rules_new)
    node.cheap_old, node.cheap_new = _cheap(node.rules), _cheap(node.rules_new)
    it = node.items
    if it is not None and it.rules_new and it.cheap_new is not None and not it.view and not it.root:
        inner = ", ".join(f"({r.source})" for r in it.rules_new)
        try:
            node.items_batch = ctx.env.compile(f"self.map(__lite_i, cel.bind(self, __lite_i, [{inner}]))")
        except cel.CompileError:
            node.items_batch = None
    if node.rules or node.broken or node.properties or node.items or node.additional:
        return node
    return None


def build(schema: Schema, env: cel.Environment | None = None) -> Node | None:
    """The compiled rules of one version's openAPIV3Schema, or None when it has none."""
    if not has_rules(schema):
        return None
    ctx = _Ctx(env or environment(), [], [], False)
    return _build(schema, "", 1, ctx, True)


def check_schema(schema: Schema, path: str, env: cel.Environment | None = None) -> list[Cause]:
    """Upstream's CRD-time checks of the rules of one openAPIV3Schema at `path` (see the module docstring)."""
    if not has_rules(schema):
        return []
    ctx = _Ctx(env or environment(), [], [], True)
    _build(schema, path, 1, ctx, True)
    total = sum(c for c, _ in ctx.costs)
    if total > cel.STATIC_ESTIMATED_CRD_COST_LIMIT:
        for cost, where in sorted(ctx.costs, reverse=True)[:4]:
            if cost > cel.STATIC_ESTIMATED_CRD_COST_LIMIT // 100:
                ctx.causes.append(field_forbidden(where, "contributed to estimated rule & messageExpression cost "
                                                  "total exceeding cost limit for entire OpenAPIv3 schema"))
        ctx.causes.append(field_forbidden(path, cel.cost_error_message(
            "x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema",
            total, cel.STATIC_ESTIMATED_CRD_COST_LIMIT)))
    return ctx.causes


def check_crd(spec: dict[str, Any]) -> list[Cause]:
    """The rules of every version of a CRD spec; paths as upstream reports them (`spec.validation...` when all
    versions share one schema, else `spec.versions[i].schema...`)."""
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    schemas = [((v.get("schema") or {}).get("openAPIV3Schema") or {}) for v in versions]
    if not any(has_rules(s) for s in schemas):
        return []
    env = environment()
    if schemas and all(s == schemas[0] for s in schemas):
        return check_schema(schemas[0], "spec.validation.openAPIV3Schema", env)
    causes: list[Cause] = []
    for i, s in enumerate(schemas):
        causes += check_schema(s, f"spec.versions[{i}].schema.openAPIV3Schema", env)
    return causes
