"""The wrap pass: a protected table read becomes a derived table that filters it.

For a reference the resolve pass (resolve.py) found to be a protected table, `wrap_protected`
asks the policy layer for the caller's filter (`decision.row_filter`: the policies that grant
the caller, OR-ed; none: FALSE), qualifies the lookup tables in it, binds the caller's
identity, and puts the filtering SELECT (wrap.py builds it) where the table stood:

    orders o   ->   (SELECT * FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE <filter>)
                     WHERE spark_partition_id() >= 0) AS o

Time travel needs a FILTER USING (TRUE) grant; a protected table cannot be read inside
LATERAL (Spark refuses the barrier there); caller predicates that cannot fail are copied
below the barrier (leakproof.py) so Spark keeps pruning. `already_filtered` recognises text that is exactly what this pass
produces now for this caller (the second rewrite of a DataFrame's SQL) so it is left alone.
The pass places what policy decided; it decides nothing itself.

>>> from datetime import datetime
>>> from rowgate.identity.caller import Caller
>>> from rowgate.policy.model import RowAccessPolicy
>>> t = TableName("spark_catalog", "default", "orders")
>>> p = RowAccessPolicy(t, "mine", ("allAuthenticatedUsers",), "owner = SESSION_USER()", datetime.min, datetime.min)
>>> render(row_filter(Caller("user:ann@example.com"), t, (p,)))
"(owner = 'ann@example.com')"
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError

from rowgate.identity.caller import Caller
from rowgate.policy import decision
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.identity import bind_caller_identity
from rowgate.rewrite.sql.leakproof import place_below, placeable
from rowgate.rewrite.sql.names import Unresolvable, resolve, written_parts
from rowgate.rewrite.sql.run import Run, never
from rowgate.rewrite.sql.scope import Scope
from rowgate.rewrite.sql.splice import RECOGNISED
from rowgate.rewrite.sql.wrap import (
    canonical,
    check_modifiers,
    derived_table,
    inner_select,
    marker_table,
    qualify_filter_tables,
    render,
    sample_condition,
    split_sample,
    unqualify_columns,
)


def wrap_protected(
    run: Run, node: exp.Table, name: TableName, policies: tuple[RowAccessPolicy, ...], parts: tuple[str, ...], root: exp.Expr
) -> None:
    """Replace the read `node` of protected table `name` by its filtering derived table."""
    check_modifiers(node, str(name))
    version = node.args.get("version")
    if version is not None and not decision.has_full_access(run.caller, policies):
        raise refuse.denied(
            "time_travel_needs_full_access", f"time travel on protected table {name} requires a FILTER USING (TRUE) grant"
        )
    if node.find_ancestor(exp.Lateral) is not None:
        # Spark refuses non-deterministic LATERAL subqueries, so the barrier under the
        # policy's filter (wrap.barrier_select) cannot be placed there, and without it
        # Spark would run the caller's predicates on hidden rows.
        raise refuse.invalid(
            "protected_read_in_lateral",
            f"{name} has a row access policy and cannot be read inside a LATERAL subquery; join it instead",
        )
    # Any sample goes above the barrier, so it draws from allowed rows only (wrap.split_sample).
    sample, limit = split_sample(node.args.get("sample"))
    inner, _ = filtering_select(run, name, policies, version, sample, limit)
    info = run.lookup(name) if version is None and sample is None and limit is None else None
    moved = placeable(node, info.columns, info.column_types) if info is not None else []
    if moved:
        inner = inner.copy()  # caller predicates that cannot fail go below the barrier (leakproof.py)
        run.found.add(leakproof_placed=((name, place_below(inner, moved)),))
    had_alias = node.args.get("alias") is not None
    default_alias = None if isinstance(node.this, exp.Identifier) else parts[-1]
    node.replace(derived_table(node, inner.copy(), default_alias=default_alias))
    if not had_alias:
        unqualify_columns(root, parts)
    record_filter(run, name, policies)
    run.changes += 1


def record_filter(run: Run, name: TableName, policies: tuple[RowAccessPolicy, ...]) -> None:
    """Report that `name` is read filtered, and by which of its policies."""
    run.found.filtered = True
    applied = tuple(f"{name}:{policy}" for policy in decision.applied_policies(run.caller, policies))
    run.found.add(tables_read=(name,), policies_applied=applied)


def filtering_select(
    run: Run,
    name: TableName,
    policies: tuple[RowAccessPolicy, ...],
    version: exp.Expr | None,
    sample: exp.Expr | None,
    limit: exp.Expr | None,
) -> tuple[exp.Select, str]:
    """The canonical filtering SELECT for `name` and its rendering (shared; copy it)."""
    if version is None and sample is None and limit is None:
        return _plain_inner(run.caller, name, policies)
    key = (name, *(render(x) if x is not None else "" for x in (version, sample, limit)))
    if key not in run.inner_cache:
        select = inner_select(name, row_filter(run.caller, name, policies), version=version, sample=sample, limit=limit)
        run.inner_cache[key] = canonical(select)
    return run.inner_cache[key]


def already_filtered(run: Run, sub: exp.Subquery, scope: Scope) -> bool:
    """A derived table that is exactly what `wrap_protected` produces now for this caller."""
    table = marker_table(sub)
    if table is None:
        return False
    try:
        parts = written_parts(table)
    except Unresolvable:
        return False
    if len(parts) != 3:
        return False
    resolved = resolve(parts, scope, never, ctes=False)
    if resolved.kind != "catalog" or resolved.name is None:
        return False
    policies = run.policies_for(resolved.name)
    if not policies:
        return False
    select = sub.this
    if table.args.get("sample") is not None:
        # `wrap_protected` never leaves a sample below the filter: there `(n ROWS)` is a LIMIT
        # on the unfiltered scan (the count of allowed rows among the first n tells how many
        # are hidden), and a percent sample spends its draws on hidden rows. Wrapped again.
        return False
    version = table.args.get("version")
    # A sample above the barrier (any seed: it draws from allowed rows only) is kept as sent.
    sample = sample_condition(select)
    barrier = select.args["from_"].this.this if sample is not None else select
    _, expected = filtering_select(run, resolved.name, policies, version, sample, barrier.args.get("limit"))
    if render(select) != expected:
        return False
    if version is not None and not decision.has_full_access(run.caller, policies):
        raise refuse.denied(
            "time_travel_needs_full_access",
            f"time travel on protected table {resolved.name} requires a FILTER USING (TRUE) grant",
        )
    record_filter(run, resolved.name, policies)
    sub.meta[RECOGNISED] = True  # forwarded as the proxy's rendering, not the client's text (splice.py)
    return True


@lru_cache(maxsize=4096)
def row_filter(caller: Caller, name: TableName, policies: tuple[RowAccessPolicy, ...]) -> exp.Expr:
    """The caller's filter for `name`, lookup names qualified, identity bound (shared; copy it).

    Cached on the caller and the policy objects themselves: a changed policy is a new key.
    """
    try:
        bound: exp.Expr | None = decision.row_filter(caller, policies)
    except SqlglotError:
        raise refuse.invalid("row_filter_unappliable", f"the row access policies of {name} cannot be applied") from None
    if bound is None:  # not reachable: policies is non-empty
        bound = exp.false()
    bound = qualify_filter_tables(bound.copy(), name)
    bind_caller_identity(bound, caller.email)
    return bound


@lru_cache(maxsize=4096)
def _plain_inner(caller: Caller, name: TableName, policies: tuple[RowAccessPolicy, ...]) -> tuple[exp.Select, str]:
    return canonical(inner_select(name, row_filter(caller, name, policies)))
