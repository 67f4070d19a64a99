"""Spark statement forms sqlglot does not parse, rewritten at token level into ones it does.

- `TABLE t [ORDER BY ...]` is `SELECT * FROM t [ORDER BY ...]` in Spark;
- `DESCRIBE QUERY <query>` is `DESCRIBE <query>` (QUERY is optional in Spark);
- `USE NAMESPACE x` is `USE SCHEMA x`;
- `DESCRIBE [TABLE] [EXTENDED|FORMATTED] t col` describes one column: the statement is parsed
  without the column (so the table name is resolved, pinned and checked like any DESCRIBE:
  EXTENDED, which shows the column's statistics, needs full access), and the column is put
  back after rendering (`SpecialForm.column`).

The rewritten token list keeps the original tokens' positions in the text, so messages and
the rendering of everything else are unchanged.

>>> from sqlglot.dialects.spark import Spark
>>> f = special_form(Spark().tokenize("DESCRIBE EXTENDED db.t `my col`"))
>>> [t.text for t in f.tokens], f.column
(['DESCRIBE', 'EXTENDED', 'db', '.', 't'], ('my col',))
>>> [t.text for t in special_form(Spark().tokenize("TABLE t LIMIT 1")).tokens]
['SELECT', '*', 'FROM', 't', 'LIMIT', '1']
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUERY_START = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.FROM, TokenType.TABLE, TokenType.L_PAREN})
_STYLES = frozenset({"EXTENDED", "FORMATTED"})
_DESCRIBE = frozenset({TokenType.DESCRIBE, TokenType.DESC})
# DESCRIBE <kind> x describes something else than a table's column.
_NOT_A_TABLE = frozenset({"FUNCTION", "DATABASE", "SCHEMA", "NAMESPACE", "CATALOG", "HISTORY", "DETAIL", "QUERY", "PROCEDURE"})


@dataclass(frozen=True)
class SpecialForm:
    tokens: list[Token]
    column: tuple[str, ...] | None = None  # DESCRIBE t col: appended after rendering


def special_form(tokens: list[Token]) -> SpecialForm | None:
    """The token list to parse instead of `tokens`, or None when it is not a special form."""
    if not tokens:
        return None
    first = tokens[0]
    if first.token_type == TokenType.TABLE and len(tokens) > 1:
        return SpecialForm(_as_select(tokens, 0))
    if first.token_type == TokenType.USE and len(tokens) > 2 and _bare(tokens[1], "NAMESPACE"):
        # sqlglot reads `USE NAMESPACE x` as the schema NAMESPACE aliased x; for Spark it is
        # `USE SCHEMA x`
        return SpecialForm([first, _like(tokens[1], TokenType.SCHEMA, "SCHEMA"), *tokens[2:]])
    if first.token_type not in _DESCRIBE or len(tokens) < 2:
        return None
    second = tokens[1]
    if _bare(second, "QUERY") and len(tokens) > 2 and tokens[2].token_type in _QUERY_START:
        rest = [first, *tokens[2:]]
        if rest[1].token_type == TokenType.TABLE and len(rest) > 2:
            rest = _as_select(rest, 1)
        return SpecialForm(rest)
    return _describe_column(tokens)


def _bare(token: Token, word: str) -> bool:
    return token.token_type != TokenType.IDENTIFIER and token.text.upper() == word


def _as_select(tokens: list[Token], i: int) -> list[Token]:
    at = tokens[i]
    made = [_like(at, TokenType.SELECT, "SELECT"), _like(at, TokenType.STAR, "*"), _like(at, TokenType.FROM, "FROM")]
    return [*tokens[:i], *made, *tokens[i + 1 :]]


def _like(at: Token, kind: TokenType, text: str) -> Token:
    return Token(kind, text, line=at.line, col=at.col, start=at.start, end=at.end)


def _name_part(token: Token) -> str | None:
    if token.token_type == TokenType.IDENTIFIER:
        return token.text
    if token.token_type in _QUERY_START or token.token_type == TokenType.PARTITION_BY:
        return None
    if _WORD.fullmatch(token.text) and token.text.upper() != "PARTITION":
        return token.text
    return None


def _multipart(tokens: list[Token], i: int) -> tuple[tuple[str, ...], int] | None:
    """Name parts `a.b.c` starting at `i`, and the index after them."""
    parts: list[str] = []
    while True:
        if i >= len(tokens):
            return None
        part = _name_part(tokens[i])
        if part is None:
            return None
        parts.append(part)
        i += 1
        if i < len(tokens) and tokens[i].token_type == TokenType.DOT:
            i += 1
            continue
        return tuple(parts), i


def _describe_column(tokens: list[Token]) -> SpecialForm | None:
    i = 1
    if any(_bare(tokens[i], word) for word in _NOT_A_TABLE):
        return None
    if _bare(tokens[i], "TABLE") and len(tokens) > i + 1:
        i += 1
    if tokens[i].token_type != TokenType.IDENTIFIER and tokens[i].text.upper() in _STYLES and len(tokens) > i + 1:
        i += 1
    table = _multipart(tokens, i)
    if table is None or table[1] >= len(tokens):
        return None
    column = _multipart(tokens, table[1])
    if column is None or column[1] != len(tokens):
        return None
    return SpecialForm(tokens[: table[1]], column=column[0])
