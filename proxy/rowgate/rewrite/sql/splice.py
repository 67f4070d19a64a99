"""The text Spark receives: the client's, with only rowgate's edits spliced in (issue #22).

While policies are in force the forwarded text differs from the client's only where rowgate
must act: protected reads wrapped, names pinned, identity functions bound. Every other
character is copied from the client's text, so every other token means to Spark exactly
what it meant in the client's text (sqlglot's rendering would rename functions, re-type
literals and drop syntax it does not know).

How: the parser records the source span of functions, columns, tables and literals
(`SpanParser`); before the passes run, the statement's tree is copied (the pristine tree).
After the passes, the pristine and the rewritten trees are compared (`edits`): the smallest
nodes that differ are the edit points, and each one's source span is replaced by the
rendering (wrap.render) of what the rewriter put there. A pinned table name replaces just
the name parts, so aliases, samples and hints stay as written.

The differential defence of canonical forwarding (issue #12) stays: client text is copied
only when the proxy is sure Spark tokenises it like sqlglot did (`lexer_safe`: no comment
with a backslash, a nested or hint-like comment, no unusual whitespace, no string escape
Spark reads differently, no raw string with a backslash, no prefixed string like `U&'...'`,
no non-ASCII outside strings and quoted identifiers). The spliced text is parsed again and must
read, for sqlglot, exactly like the rewritten tree (same rendering), and every edit must
start and end on token boundaries without overlapping another. When any of this fails,
`splice` answers None and the caller renders canonically, as before (never worse).

>>> from sqlglot.dialects.spark import Spark
>>> sql = "SELECT nvl(a, b), current_user() FROM db.t /* hi */ x"
>>> tokens = Spark().tokenize(sql)
>>> tree = parse_with_spans(tokens, sql)[0]
>>> pristine = tree.copy()
>>> _ = tree.find(exp.CurrentUser).replace(exp.Literal.string("ann@example.com"))
>>> t = tree.find(exp.Table); t.set("catalog", exp.to_identifier("spark_catalog", quoted=True))
>>> out = splice(sql, tokens, pristine, tree); reads_as(out, render(tree))
True
>>> out
"SELECT nvl(a, b), 'ann@example.com' FROM `spark_catalog`.db.t /* hi */ x"
>>> lexer_safe("SELECT 1 -- \\\\\\n FROM t", Spark().tokenize("SELECT 1 -- \\\\\\n FROM t"))
'a -- comment holding a backslash'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError
from sqlglot.helper import ensure_list
from sqlglot.tokens import Token, TokenType

from rowgate.rewrite.sql.canonical import spark_strings
from rowgate.rewrite.sql.identity import NAMED
from rowgate.rewrite.sql.wrap import render

_SPARK = Dialect.get_or_raise("spark")
_SPAN = "rowgate_span"
# Meta protect.already_filtered sets on a derived table it recognised as the proxy's own
# filtering text: recognition is by sqlglot's reading, so Spark gets the proxy's rendering.
RECOGNISED = "rowgate_recognised"
_NAME_KEYS = ("catalog", "db", "this")
_WHITESPACE = " \t\n\r"
_PLAIN_TOKEN = re.compile(r"[\x21-\x7e]+(?:[ \t\r\n]+[\x21-\x7e]+)*")  # GROUP BY is one token
_HINT = re.compile(r"/\*\+[\x20-\x7e\t\r\n]*\*/")
# Spark reads `\\u` + 4 and `\\U` + 8 hex digits as a character; else the letter, like sqlglot
# (`'\\Users'` is `Users` to both, as in Spark's own `like` examples).
_UNICODE_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})")
_HEX = re.compile(r"[Xx][ \t\r\n]*'[0-9A-Fa-f]*'")  # X 'F0' too: Spark's typed binary literal
_NAME_TOKENS = frozenset({TokenType.VAR, TokenType.IDENTIFIER})
_QUOTED_TYPES = frozenset({TokenType.STRING, TokenType.RAW_STRING, TokenType.HEX_STRING, TokenType.IDENTIFIER})
_Node = TypeVar("_Node", bound="exp.Expr | None")


class SpanParser(_SPARK.parser_class):  # type: ignore[name-defined]
    """Spark's sqlglot parser, also recording where functions, columns, tables and literals
    were read from (meta `rowgate_span`: first and last character offsets). The trees it
    builds are the plain parser's."""

    def _spanned(self, method: Callable[..., _Node], *args: Any, **kwargs: Any) -> _Node:
        first = self._curr
        node = method(*args, **kwargs)
        last = self._prev
        if isinstance(node, exp.Expr) and first is not None and last is not None and last.end >= first.start:
            node.meta[_SPAN] = (first.start, last.end)
        return node

    def _parse_function(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
        return self._spanned(super()._parse_function, *args, **kwargs)

    def _parse_column(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
        return self._spanned(super()._parse_column, *args, **kwargs)

    def _parse_table(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
        return self._spanned(super()._parse_table, *args, **kwargs)

    def _parse_table_parts(self, *args: Any, **kwargs: Any) -> exp.Table | exp.Dot | None:
        return self._spanned(super()._parse_table_parts, *args, **kwargs)

    def _parse_primary(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
        return self._spanned(super()._parse_primary, *args, **kwargs)

    def _parse_pipe_syntax_set_operator(self, query: exp.Query) -> exp.Query | None:
        """sqlglot's reads BigQuery's `|> UNION ALL (q1), (q2)` only; Spark writes one query
        term after the operator, `|> UNION ALL TABLE t` or `|> EXCEPT (SELECT ...)`, read
        here as that query (`TABLE t` as `SELECT * FROM t`, what Spark makes of it)."""
        right: exp.Expr | None = None
        index = self._index
        if self._match_set(self.SET_OPERATIONS):
            kind = {TokenType.UNION: exp.Union, TokenType.EXCEPT: exp.Except}.get(self._prev.token_type, exp.Intersect)
            distinct = True if self._match(TokenType.DISTINCT) else False if self._match(TokenType.ALL) else None
            if self._match(TokenType.TABLE):
                start = self._prev
                # A missing name is a parse error `parse_with_spans` raises (RAISE), so no tree
                # read here holds anything but a table.
                right = exp.select("*").from_(cast(exp.Table, self._parse_table_parts()), copy=False)
                right.meta[_SPAN] = (start.start, self._prev.end)
                default = self.dialect.SET_OP_DISTINCT_BY_DEFAULT[kind]
                args: dict = {"distinct": default if distinct is None else distinct}
                first_setop: exp.Expr = kind()
        if right is None:
            self._retreat(index)
            parsed = self.parse_set_operation(this=query)
            if not parsed:
                return None
            first_setop, right = parsed, parsed.expression
            if right is None:
                self.raise_error("Expecting a query after a pipe set operator")
                return None
            right.pop()
            if isinstance(right, exp.Subquery):
                right = right.unnest().pop()
            args = {k: v for k, v in parsed.args.items() if k not in ("this", "expression")}
        query = self._build_pipe_cte(query=query, expressions=[exp.Star()])
        with_ = query.args.get("with_")
        ctes = with_.pop() if with_ else None
        if isinstance(first_setop, exp.Union):
            query = query.union(right, copy=False, **args)
        elif isinstance(first_setop, exp.Except):
            query = query.except_(right, copy=False, **args)
        else:
            query = query.intersect(right, copy=False, **args)
        query.set("with_", ctes)
        return self._build_pipe_cte(query=query, expressions=[exp.Star()])

    def _parse_bitwise(self) -> exp.Expr | None:
        """sqlglot's, plus Spark's unsigned shift `a >>> b` (three adjacent `>`), read as
        `shiftrightunsigned(a, b)`, the function Spark itself makes of it."""
        this = self._parse_term()
        while True:
            if self._unsigned_shift():
                self._advance(3)
                call = exp.Anonymous(this="shiftrightunsigned", expressions=[this, self._parse_term()])
                this = self.expression(call)
            elif self._match_set(self.BITWISE):
                this = self.expression(self.BITWISE[self._prev.token_type](this=this, expression=self._parse_term()))
            elif self.dialect.DPIPE_IS_STRING_CONCAT and self._match(TokenType.DPIPE):
                concat = exp.DPipe(this=this, expression=self._parse_term(), safe=not self.dialect.STRICT_STRING_CONCAT)
                this = self.expression(concat)
            elif self._match(TokenType.DQMARK):
                this = self.expression(exp.Coalesce(this=this, expressions=ensure_list(self._parse_term())))
            elif self._match_pair(TokenType.LT, TokenType.LT):
                this = self.expression(exp.BitwiseLeftShift(this=this, expression=self._parse_term()))
            elif self._match_pair(TokenType.GT, TokenType.GT):
                this = self.expression(exp.BitwiseRightShift(this=this, expression=self._parse_term()))
            elif self.JSON_OPERATORS and self._match_set(self.JSON_OPERATORS):
                this = self.JSON_OPERATORS[self._prev.token_type](self, this, self._parse_term())
            else:
                return this

    def _unsigned_shift(self) -> bool:
        three = self._tokens[self._index : self._index + 3]
        return (
            len(three) == 3
            and all(t.token_type == TokenType.GT for t in three)
            and three[0].end + 1 == three[1].start
            and three[1].end + 1 == three[2].start
        )


def parse_with_spans(tokens: list[Token], sql: str) -> list[exp.Expr]:
    """Parse like `rewriter` does (errors raise), recording source spans; None trees dropped."""
    parser = SpanParser(dialect=_SPARK, error_level=ErrorLevel.RAISE)
    try:
        return [t for t in parser.parse(tokens, sql) if t is not None]
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:
        # sqlglot itself failed on a form it half knows (`|> LIMIT 1 OFFSET 1`): unreadable
        raise ParseError(f"sqlglot could not read the statement ({type(e).__name__})") from e


# ---------------------------------------------------------------------------- lexer safety


def lexer_safe(sql: str, tokens: list[Token]) -> str | None:
    """None when Spark's lexer reads `sql` into the same tokens as sqlglot did (`tokens`,
    after `canonical.spark_strings`), else what makes the proxy unsure.

    Conservative: the text between tokens must be plain whitespace and comments Spark and
    sqlglot end at the same place, and every token's text must be one whose extent and
    meaning the two lexers agree on.
    """
    last, previous = 0, None
    for token in tokens:
        if token.end < last:
            continue  # a token sqlglot derived from the previous one's text (127Y: 127 :: TINYINT)
        if token.start < last:
            return "overlapping tokens"
        problem = _gap(sql[last : token.start]) or _token(sql, token, previous)
        if problem:
            return problem
        last, previous = token.end + 1, token
    return _gap(sql[last:])


def _gap(text: str) -> str | None:
    """Whitespace and comments, read the way Spark reads them (SqlBaseLexer)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
        elif text.startswith("--", i):
            end = i + 2
            while end < n and text[end] not in "\r\n":
                end += 1
            body = text[i:end]
            if "\\" in body:
                return "a -- comment holding a backslash"
            i = end
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                return "an unclosed comment"
            body = text[i + 2 : close]
            if body.startswith("+"):
                return "a hint where Spark does not read one"
            if "/*" in body or "\\" in body or any(q in body for q in "'\"`"):
                return "a nested comment or a comment holding quotes or backslashes"
            if not body.isascii():
                return "a comment holding non-ASCII characters"
            i = close + 2
        else:
            return f"the character {c!r} between tokens"
    return None


def _token(sql: str, token: Token, previous: Token | None) -> str | None:
    raw = sql[token.start : token.end + 1]
    kind = token.token_type
    if kind == TokenType.HINT:
        body = raw[3:-2]
        if previous is None or previous.token_type != TokenType.SELECT or not _HINT.fullmatch(raw):
            return "a hint where Spark may not read one"
        if "/*" in body or "*/" in body or any(q in body for q in '"\\`'):
            return "a hint holding quotes, backslashes or comments"
        return None
    if kind == TokenType.IDENTIFIER:
        return None if len(raw) >= 2 and raw[0] == raw[-1] == "`" else "an identifier not quoted with backticks"
    if kind == TokenType.HEX_STRING:
        return None if _HEX.fullmatch(raw) else "a hex string"
    if kind == TokenType.RAW_STRING:
        # Spark ends a raw string at the next quote, backslash or not; sqlglot keeps the
        # text between the quotes as the value. They agree when no quote is inside.
        quote = raw[1:2]
        if raw[:1] not in ("r", "R") or quote not in ("'", '"') or len(raw) < 3 or raw[-1] != quote or quote in raw[2:-1]:
            return "a raw string Spark may end elsewhere"
        return _prefix(sql, token)
    if kind == TokenType.STRING:
        # A double-quoted string is a string for Spark unless spark.sql.ansi.doubleQuotedIdentifiers,
        # which callers cannot set while tables are protected (pipeline/statements/guard_config.py).
        return _string(raw) or _prefix(sql, token)
    if kind in _QUOTED_TYPES or not _PLAIN_TOKEN.fullmatch(raw) or any(q in raw for q in ("'", '"', "`", "\\", "--", "/*")):
        return f"the token {raw[:40]!r}"
    return None


def _prefix(sql: str, token: Token) -> str | None:
    """A string glued to `&` or a one-letter word (`U&'...'`, `E'...'`, `B'...'`) may be a
    prefixed literal to one lexer and a word and a string to the other. A typed literal
    glued to its type (`DATE'2024-01-01'`, `TIMESTAMP'...'`) reads alike."""
    start = token.start
    if start and sql[start - 1] == "&":
        return "a prefixed string literal"
    word = start
    while word and (sql[word - 1].isalnum() or sql[word - 1] == "_"):
        word -= 1
    if start - word == 1 or (start > word and not sql[word:start].isascii()):
        return "a prefixed string literal"
    return None


def _string(raw: str) -> str | None:
    """A quoted literal whose extent and escapes Spark reads like sqlglot."""
    quote = raw[:1]
    if quote not in ("'", '"') or len(raw) < 2 or raw[-1] != quote:
        return "an unterminated string"
    i, body = 0, raw[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1 : i + 2]
            if not nxt or nxt in "\r\n" or nxt.isdigit() or not nxt.isascii() or _UNICODE_ESCAPE.match(body, i):
                return "a string escape Spark may read differently"
            i += 2
        elif c == quote:
            if body[i + 1 : i + 2] != quote:
                return "a string holding a lone quote"
            i += 2
        else:
            i += 1
    return None


# ---------------------------------------------------------------------------- edits


class _NoSplice(Exception):
    pass


def _empty(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, list) and not value)


def _same_scalar(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _keys(node: exp.Expr) -> set[str]:
    return {k for k, v in node.args.items() if not _empty(v)}


def _equal(a: Any, b: Any) -> bool:
    """Strict structural equality (identifier case and quoting count)."""
    if isinstance(a, exp.Expr) or isinstance(b, exp.Expr):
        if type(a) is not type(b) or _keys(a) != _keys(b):
            return False
        return all(_equal(a.args.get(k), b.args.get(k)) for k in _keys(a))
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            return False
        return all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if _empty(a) and _empty(b):
        return True
    return _same_scalar(a, b)


Edit = tuple[int, int, str]  # first and last character replaced (none: last = first - 1), replacement


def edits(pristine: exp.Expr, rewritten: exp.Expr, tokens: list[Token] | None = None) -> list[Edit]:
    """The source spans of `pristine` (the client's parse) that differ in `rewritten`, with
    their replacement text; raises `_NoSplice` when a differing node has no known span.
    `tokens` (of the client's text) place an alias after a whole projection."""
    out: list[Edit] = []
    _diff(pristine, rewritten, out, tokens or [])
    return sorted(out)


def _diff(p: exp.Expr, r: exp.Expr, out: list[Edit], tokens: list[Token]) -> None:
    if isinstance(r, exp.Alias) and r.meta_get(NAMED) and not isinstance(p, exp.Alias):
        # identity.py named a projection after the client's expression: only the alias is new
        where = _whole(span(p), tokens)
        if where is None:
            raise _NoSplice("no source span for a named projection")
        _diff(p, r.this, out, tokens)
        out.append((where[1] + 1, where[1], "AS " + render(r.args["alias"].copy())))
        return
    if type(p) is not type(r) or r.meta_get(RECOGNISED):
        out.append(_replace(p, r))
        return
    keys = _keys(p) | _keys(r)
    if isinstance(p, exp.Table) and all(_equal(p.args.get(k), r.args.get(k)) for k in keys - set(_NAME_KEYS)):
        if not all(_equal(p.args.get(k), r.args.get(k)) for k in _NAME_KEYS):
            out.append(_rename(p, r))
        return
    pairs: list[tuple[exp.Expr, exp.Expr]] = []
    for key in keys:
        pv, rv = p.args.get(key), r.args.get(key)
        if isinstance(pv, exp.Expr) and isinstance(rv, exp.Expr):
            pairs.append((pv, rv))
        elif isinstance(pv, list) and isinstance(rv, list) and len(pv) == len(rv):
            for x, y in zip(pv, rv, strict=True):
                if isinstance(x, exp.Expr) and isinstance(y, exp.Expr):
                    pairs.append((x, y))
                elif not _equal(x, y):
                    out.append(_replace(p, r))
                    return
        elif not _equal(pv, rv):
            out.append(_replace(p, r))
            return
    for x, y in pairs:
        _diff(x, y, out, tokens)


def _whole(where: tuple[int, int] | None, tokens: list[Token]) -> tuple[int, int] | None:
    """`where` widened to a whole projection: a node's span ends at its last child, so
    closing parentheses it opened (`a IN (b, c)`) and parentheses around it are added."""
    if where is None:
        return None
    index = {t.start: i for i, t in enumerate(tokens)}
    first = index.get(where[0])
    if first is None:
        return None
    last = first
    while last + 1 < len(tokens) and tokens[last + 1].end <= where[1]:
        last += 1
    if tokens[last].end != where[1]:
        return None
    depth = sum(
        1 if t.token_type == TokenType.L_PAREN else -1 if t.token_type == TokenType.R_PAREN else 0
        for t in tokens[first : last + 1]
    )
    while depth > 0 and last + 1 < len(tokens) and tokens[last + 1].token_type == TokenType.R_PAREN:
        last, depth = last + 1, depth - 1
    if depth != 0:
        return None
    while (
        first > 0
        and last + 1 < len(tokens)
        and tokens[first - 1].token_type == TokenType.L_PAREN
        and tokens[last + 1].token_type == TokenType.R_PAREN
    ):
        first, last = first - 1, last + 1
    return tokens[first].start, tokens[last].end


def span(node: exp.Expr) -> tuple[int, int] | None:
    """First and last character of the client's text `node` was read from (pristine tree)."""
    first, last = None, None
    for n in node.walk():
        meta = n._meta
        if not meta:
            continue
        for s, e in (meta.get(_SPAN) or (None, None), (meta.get("start"), meta.get("end"))):
            if isinstance(s, int) and isinstance(e, int):
                first = s if first is None else min(first, s)
                last = e if last is None else max(last, e)
    return None if first is None or last is None else (first, last)


def _replace(p: exp.Expr, r: exp.Expr) -> Edit:
    where = span(p)
    if where is None:
        raise _NoSplice(f"no source span for {type(p).__name__}")
    return (where[0], where[1], render(r.copy()))


def _rename(p: exp.Expr, r: exp.Expr) -> Edit:
    """A pinned name: only the name parts are replaced (alias, sample, hints stay)."""
    spans = [span(part) for part in (p.args.get(k) for k in _NAME_KEYS) if isinstance(part, exp.Expr)]
    if not spans or any(s is None for s in spans):
        raise _NoSplice("no source span for a table name")
    name = exp.Table(**{k: r.args[k].copy() for k in _NAME_KEYS if isinstance(r.args.get(k), exp.Expr)})
    return (min(s[0] for s in spans if s), max(s[1] for s in spans if s), render(name))


# ---------------------------------------------------------------------------- splice


def splice(sql: str, tokens: list[Token], pristine: exp.Expr, rewritten: exp.Expr) -> str | None:
    """The client's `sql` with rowgate's edits spliced in, or None when it cannot be (see the
    module docstring); `tokens` are all of `sql`'s tokens (spark_strings applied).

    A text with edits must still be checked with `reads_as` against the canonical rendering
    of `rewritten`; a text without edits is the client's own, which parsed into `pristine`.
    """
    if lexer_safe(sql, tokens) is not None:
        return None
    if "__tmp" in sql.lower() and any(t.token_type == TokenType.PIPE_GT for t in tokens):
        return None  # sqlglot reads |> as CTEs named __tmpN, which could stand for the client's names
    try:
        changes = edits(pristine, rewritten, tokens)
    except (_NoSplice, SqlglotError, RecursionError):
        return None
    if not changes:
        return sql
    starts = {t.start for t in tokens}
    ends = {t.end for t in tokens}
    pieces: list[str] = []
    last = 0
    for first, end, text in changes:
        insertion = first == end + 1  # text put after the token ending at `end`
        if first < last or (first not in starts and not insertion) or end not in ends:
            return None
        pieces.append(sql[last:first])
        if first > 0 and sql[first - 1] not in _WHITESPACE + "(,":
            text = " " + text
        if end + 1 < len(sql) and sql[end + 1] not in _WHITESPACE + "),;":
            text += " "
        pieces.append(text)
        last = end + 1
    pieces.append(sql[last:])
    return "".join(pieces)


def reads_as(text: str, rendered: str) -> bool:
    """Whether sqlglot reads `text` as one statement rendering exactly as `rendered`.

    `TABLE <name> ...` is read as `SELECT * FROM <name> ...` (forms.py), only with a plain
    name after TABLE: a spliced `TABLE (SELECT ...) AS t` is no Spark statement, so it does
    not verify and the statement is rendered canonically."""
    from rowgate.rewrite.sql.forms import special_form

    try:
        tokens = spark_strings(_SPARK.tokenize(text), text)
        if len(tokens) > 1 and tokens[0].token_type == TokenType.TABLE and tokens[1].token_type in _NAME_TOKENS:
            form = special_form(tokens)
            tokens = form.tokens if form is not None else tokens
        again = parse_with_spans(tokens, text)
        return len(again) == 1 and render(again[0]) == rendered
    except (SqlglotError, RecursionError):
        return False
