"""Builders for the CEL the admission policies run on the API server.

Every policy builds its expressions from these instead of joining strings by hand: text that
reaches CEL as a literal goes through `lit` (quoted and escaped, so a label value or a message
can never end the literal early), raw CEL is an `Expr`, and `message` tells the two apart, so a
messageExpression is literal text and expressions in the order a tenant reads them.
"""

from __future__ import annotations

from collections.abc import Iterable


class Expr(str):
    """A piece of CEL source (as opposed to text that must become a CEL string literal)."""

    __slots__ = ()


def lit(text: str) -> Expr:
    """`text` as a single-quoted CEL string literal."""
    return Expr("'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")


def str_list(items: Iterable[str]) -> Expr:
    """A CEL list of string literals: `['a', 'b']`."""
    return Expr("[" + ", ".join(lit(i) for i in items) + "]")


def any_of(*terms: str) -> Expr:
    """`a || b || ...` (callers wrap it in `group` where it sits inside a larger term)."""
    return Expr(" || ".join(terms))


def all_of(*terms: str) -> Expr:
    """`a && b && ...`."""
    return Expr(" && ".join(terms))


def concat(*terms: str) -> Expr:
    """`a + b + ...` (lists or strings)."""
    return Expr(" + ".join(terms))


def call(receiver: str, method: str, *args: str) -> Expr:
    """A method call: `receiver.method(args...)`."""
    return Expr(f"{receiver}.{method}({', '.join(args)})")


def group(expr: str) -> Expr:
    return Expr(f"({expr})")


def not_(expr: str) -> Expr:
    """Negation; `expr` must already be a single term (a call, a field or a group)."""
    return Expr(f"!{expr}")


def has(field: str) -> Expr:
    return Expr(f"has({field})")


def or_default(field: str, default: str) -> Expr:
    """The field's value, or `default` when it is absent: `(has(f) ? f : default)`."""
    return Expr(f"(has({field}) ? {field} : {default})")


def if_(cond: str, then: str, otherwise: str) -> Expr:
    """The conditional `cond ? then : otherwise` (unparenthesized, as CEL's lowest precedence)."""
    return Expr(f"{cond} ? {then} : {otherwise}")


def eq(left: str, right: str) -> Expr:
    return Expr(f"{left} == {right}")


def ne(left: str, right: str) -> Expr:
    return Expr(f"{left} != {right}")


def in_(item: str, container: str) -> Expr:
    return Expr(f"{item} in {container}")


def index(container: str, key: str) -> Expr:
    return Expr(f"{container}[{key}]")


def gt(left: str, right: str) -> Expr:
    return Expr(f"{left} > {right}")


def size(collection: str) -> Expr:
    return Expr(f"size({collection})")


def size_is(collection: str, n: int) -> Expr:
    return eq(size(collection), str(n))


def is_empty(collection: str) -> Expr:
    return size_is(collection, 0)


def absent_or_empty(field: str) -> Expr:
    """True when the list/map field is missing or has no items."""
    return group(any_of(not_(has(field)), is_empty(field)))


def set_and_true(*fields: str) -> Expr:
    """`has(a) && has(a.b) && a.b`: each field is tested in order, the last is the boolean."""
    return all_of(*(has(f) for f in fields), fields[-1])


def starts_with_any(var: str, prefixes: Iterable[str]) -> Expr:
    """`var` begins with one of `prefixes`."""
    return any_of(*(call(var, "startsWith", lit(p)) for p in prefixes))


def exists(collection: str, var: str, predicate: str) -> Expr:
    return call(collection, "exists", var, predicate)


def keys_where(map_expr: str, var: str, predicate: str) -> Expr:
    """The keys of a map for which `predicate` (over `var`) holds."""
    return call(call(map_expr, "map", var, var), "filter", var, predicate)


def names_where(collection: str, predicate: str) -> Expr:
    """Names of the items of `collection` (bound to `c`) for which `predicate` holds."""
    return call(call(collection, "filter", "c", predicate), "map", "c", "c.name")


def joined(list_expr: str, sep: str = ", ") -> Expr:
    return call(list_expr, "join", lit(sep))


def same_quantity(a: str, b: str) -> Expr:
    """`string(a)` and `b` are equal quantities (e.g. 8Gi == 8192Mi).

    The CEL quantity library has no equality; neither greater nor less means equal."""
    qa, qb = Expr(f"quantity(string({a}))"), Expr(f"quantity({b})")
    return all_of(not_(call(qa, "isGreaterThan", qb)), not_(call(qa, "isLessThan", qb)))


def message(*parts: str) -> Expr:
    """A messageExpression: plain `str` parts are text (quoted), `Expr` parts are CEL."""
    return Expr(" + ".join(p if isinstance(p, Expr) else lit(p) for p in parts))
