"""`rewrite_sql`: one SQL text, one caller, one session -> the text Spark may run.

This module reads the text; the passes over a parsed statement are data (passes.py):

1. fast path: no table is protected and the text is a plain query with no identity
   function -> forwarded untouched, unparsed;
   (before reading any text, it is charged to the request's budget, text_budget.py: past
   the bound it is refused while protection is in force, forwarded unread otherwise)
2. tokenize like Spark (`canonical.spark_strings`); several statements, a `${...}` variable
   or text the proxy cannot tokenize are refused while protection is in force;
3. `text_statements.classify_text`: SET/RESET/SET CATALOG/EXPLAIN/SHOW/ADD/LIST and the
   proxy's own policy DDL, read from tokens the way Spark reads them and rendered by
   `canonical`; EXPLAIN rewrites the explained statement;
4. parse with sqlglot (Spark dialect, errors raise), with positional `?` parameters numbered
   so that rendering can put them back in order and `forms.special_form` for forms sqlglot
   does not parse (DESCRIBE t col); anything that does not parse, is an opaque `Command`
   or is not exactly one statement is refused while protection is in force;
5. `passes.run_passes`: normalize -> classify -> shape -> bind identity -> effects ->
   reads (resolve names -> expand views -> wrap protected reads -> pin) -> stored bodies
   -> pin names -> shared views -> forward.

The forwarded text is the client's, with only the proxy's edits spliced in (splice.py,
issue #22): protected reads wrapped, names pinned, identity functions bound. Where the
proxy is not sure Spark's lexer reads the client's text like sqlglot's (a `--` comment
continued over a backslash-newline, for one) or the splice cannot be verified, the whole
statement is the proxy's own rendering instead (canonical forwarding, issue #12). With
nothing protected and nothing changed, a statement passes byte for byte.

"Protection in force" means at least one table has a policy. The `RewriteContext` protocol
has no way to ask that; `rewrite_sql` uses an optional `has_protected_tables()` method of
the context when there is one (the policy snapshot's `has_any()`), and otherwise assumes
protection is in force (`protection.protection_in_force`).

>>> from types import SimpleNamespace
>>> from datetime import datetime
>>> from rowgate.identity.caller import Caller
>>> from rowgate.policy.model import RowAccessPolicy, TableName
>>> t = TableName("spark_catalog", "default", "orders")
>>> p = RowAccessPolicy(t, "mine", ("allAuthenticatedUsers",), "owner = SESSION_USER()", datetime.min, datetime.min)
>>> ctx = SimpleNamespace(
...     caller=Caller("user:ann@example.com"), is_admin=False, current_catalog="spark_catalog",
...     current_schema="default", temp_view_exists=lambda n: False, lookup=lambda n: None,
...     policies_for=lambda n: (p,) if n == t else (), has_protected_tables=lambda: True)
>>> rewrite_sql("SELECT o.id FROM orders o WHERE o.id > 1", ctx).sql
"SELECT o.id FROM (SELECT * FROM (SELECT * FROM `spark_catalog`.`default`.`orders` WHERE TRUE AND ((owner = 'ann@example.com'))) WHERE SPARK_PARTITION_ID() >= 0) AS o WHERE o.id > 1"
>>> rewrite_sql("SELECT * FROM lineitem -- a comment", ctx).sql  # unknown: a temp view or nothing
'SELECT * FROM `system`.`session`.`lineitem` -- a comment'
>>> rewrite_sql("SELECT * FROM lineitem -- a comment \\\\", ctx).sql  # Spark may read on: canonical
'SELECT * FROM `system`.`session`.`lineitem`'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.tokens import Token, TokenType

from rowgate.rewrite.sql import canonical as own_text
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.forms import special_form
from rowgate.rewrite.sql.names import POSITIONAL_PREFIX, Args
from rowgate.rewrite.sql.passes import Statement, passthrough, run_passes
from rowgate.rewrite.sql.protection import protection_in_force
from rowgate.rewrite.sql.result import RewriteResult
from rowgate.rewrite.sql.run import Run
from rowgate.rewrite.sql.splice import parse_with_spans
from rowgate.rewrite.sql.text_statements import TextStatement, classify_text

__all__ = ["protection_in_force", "rewrite_sql"]

_SPARK = Dialect.get_or_raise("spark")

_QUERY_START = re.compile(r"\s*(?:select\b|values\b|\()", re.IGNORECASE)


def rewrite_sql(sql: str, ctx: RewriteContext, *, args: Args = None, name_identity_columns: bool = True) -> RewriteResult:
    """Rewrite one SQL text for the caller and session of `ctx`; raises a `Refusal` (errors.py).

    `args` are the statement's SQL arguments: a mapping for named (`:name`) parameters or a
    sequence for positional (`?`) ones; only string values matter (for IDENTIFIER()).
    `name_identity_columns=False` is for a DataFrame expression string rewritten as
    `SELECT <text>`: an alias there would not be valid everywhere the text is used.
    A context with a `rewrite_memo` (proxy/rowgate/rewrite/sql/memo.py) may answer from it.
    """
    guarded = protection_in_force(ctx)
    if not guarded and ";" not in sql and "user" not in sql.lower() and _QUERY_START.match(sql):
        return RewriteResult(sql=sql, statement_kind="query", analysed=False)
    memo = getattr(ctx, "rewrite_memo", None)
    if memo is not None:
        return memo.rewrite(sql, ctx, args, name_identity_columns, _rewrite_uncached)
    return _rewrite_uncached(sql, ctx, args, name_identity_columns)


def _rewrite_uncached(sql: str, ctx: RewriteContext, args: Args, name_identity_columns: bool) -> RewriteResult:
    guarded = protection_in_force(ctx)
    run = Run(ctx, args, guarded)
    run.name_identity_columns = name_identity_columns
    budget = getattr(ctx, "text_budget", None)  # text_budget.py: per request, set by the pipeline
    if budget is not None and not budget.charge(sql):
        if guarded:
            raise refuse.invalid("sql_text_over_budget", budget.refusal_text())
        run.unanalysable("a text over the bound of SQL rowgate reads for one request")
        return passthrough(sql, "unparsed")
    try:
        return _text(run, sql)
    except RecursionError:
        if guarded:
            raise refuse.invalid("sql_nested_too_deeply", "the statement is nested too deeply for the proxy to analyse") from None
        return RewriteResult(sql=sql, statement_kind="unparsed", analysed=False)


def _split_statements(tokens: list[Token]) -> list[list[Token]]:
    out: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            out.append([])
        else:
            out[-1].append(token)
    return [s for s in out if s]


def _text(run: Run, sql: str) -> RewriteResult:
    if run.guarded and "${" in sql:
        raise refuse.invalid(
            "sql_variable_substitution", "${...} variable substitution is not allowed while row access policies are in force"
        )
    try:
        tokens = own_text.spark_strings(_SPARK.tokenize(sql), sql)
    except SqlglotError as e:
        run.unanalysable(f"SQL the proxy cannot tokenize ({_short(e)})")
        return passthrough(sql, "unparsed")
    parts = _split_statements(tokens)
    if not parts:
        return passthrough("" if run.guarded else sql, "empty", analysed=True, source=sql)
    if len(parts) > 1:
        run.unanalysable("multiple statements in one text (SQL scripting)")
        return passthrough(sql, "multiple")
    return _statement(run, sql, parts[0], tokens)


def _statement(run: Run, sql: str, tokens: list[Token], all_tokens: list[Token]) -> RewriteResult:
    text = classify_text(tokens, sql)
    if text is not None:
        if text.kind == "explain":
            return _explain(run, sql, text)
        if text.refusal is not None:
            run.unanalysable(text.refusal)
        if text.admin_only is not None and run.guarded and not run.ctx.is_admin:
            raise refuse.denied("admin_only_statement", text.admin_only)
        out = own_text.text_statement(text, tokens, sql) if run.guarded else sql
        return passthrough(out, text.kind, analysed=text.refusal is None, effects=text.effects, source=sql)
    parse_sql, parse_tokens, renamed = sql, tokens, False
    if isinstance(run.args, Sequence) and not isinstance(run.args, (str, bytes)):
        holders = [t for t in tokens if t.token_type == TokenType.PLACEHOLDER and t.text == "?"]
        if holders:
            parse_sql = _number_positional(sql, holders)
            parse_tokens = _split_statements(own_text.spark_strings(_SPARK.tokenize(parse_sql), parse_sql))[0]
            renamed = True
            run.positional_count = len(holders)
    form = special_form(parse_tokens)
    if form is not None:
        parse_tokens, run.describe_column = form.tokens, form.column
    try:
        trees = parse_with_spans(parse_tokens, parse_sql)
    except SqlglotError as e:
        run.unanalysable(f"SQL the proxy cannot parse ({_short(e)})")
        return passthrough(sql, "unparsed")
    if len(trees) != 1:
        run.unanalysable("a text that does not hold exactly one statement")
        return passthrough(sql, "unparsed")
    tree = trees[0]
    command = tree if isinstance(tree, exp.Command) else tree.find(exp.Command)
    if command is not None:
        run.unanalysable(f"the {str(command.this).upper()} statement (opaque to the proxy's parser)")
        return passthrough(sql, "command")
    # The client's parse, kept for splicing (splice.py); not for forms the proxy re-tokenized,
    # but for `TABLE t`, whose tokens keep their places (reads_as reads it the same way).
    spliceable = not renamed and (form is None or (form.column is None and tokens[0].token_type == TokenType.TABLE))
    statement = Statement(sql, tree, renamed, pristine=tree.copy() if spliceable else None, tokens=all_tokens)
    return run_passes(run, statement)


def _explain(run: Run, sql: str, text: TextStatement) -> RewriteResult:
    assert text.explained_offset is not None
    offset = text.explained_offset
    inner_sql = sql[offset:]
    inner = _text(run, inner_sql)
    if run.guarded:
        out = " ".join(("EXPLAIN", *((text.explain_mode,) if text.explain_mode else ()), inner.sql))
    else:
        out = sql if inner.sql == inner_sql else sql[:offset] + inner.sql
    return replace(inner, sql=out, statement_kind="explain", changed=out != sql)


def _number_positional(sql: str, holders: list[Token]) -> str:
    """Give every `?` a name recording its text position, so parsing cannot reorder them."""
    pieces, last = [], 0
    for i, token in enumerate(holders):
        pieces.append(sql[last : token.start])
        pieces.append(f":{POSITIONAL_PREFIX}{i}")
        last = token.end + 1
    pieces.append(sql[last:])
    return "".join(pieces)


def _short(error: SqlglotError) -> str:
    if isinstance(error, ParseError) and error.errors:
        first = error.errors[0]
        return f"{first.get('description')} at line {first.get('line')}, column {first.get('col')}"
    return str(error).splitlines()[0][:200]
