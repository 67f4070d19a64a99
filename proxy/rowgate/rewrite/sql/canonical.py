"""The proxy's own text for statements it reads from tokens, not from a parse tree.

Spark's lexer and sqlglot's differ on comments (Spark continues a `--` comment over a
backslash-newline), escapes and odd whitespace, so the client's bytes could mean one thing
to the proxy and another to Spark (issue #12). Parsed statements are forwarded as the
client's text with the proxy's edits spliced in where the proxy is sure of Spark's reading
(splice.py, issue #22), else rendered by sqlglot (`wrap.render`); the statements `text_statements.classify_text` reads from tokens (SET,
RESET, SET CATALOG, SHOW, CLEAR CACHE, LIST, ADD) are rendered here from what the proxy
read: comments are dropped, strings and identifiers are quoted the one way the proxy knows
Spark reads like it does, and anything else is refused.

>>> from sqlglot.dialects.spark import Spark
>>> text = "SHOW /* x */ TABLES IN db -- \\\\\\n LIKE 'a*'"
>>> show_text(Spark().tokenize(text), text)
"SHOW TABLES IN db LIKE 'a*'"
>>> set_text((("spark.sql.shuffle.partitions", "4"),))
'SET spark.sql.shuffle.partitions=4'
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import cast

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from rowgate.refusal import Refusal
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.text_statements import TextStatement

_SPARK = Dialect.get_or_raise("spark")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_KEY = re.compile(r"[a-zA-Z_0-9\\.:]+")
# Punctuation a token-rendered statement may hold; no operator that could start a comment.
_PUNCTUATION = {TokenType.DOT: ".", TokenType.COMMA: ",", TokenType.L_PAREN: "(", TokenType.R_PAREN: ")", TokenType.EQ: "="}
# Arguments of LIST/ADD (paths, URIs): Spark reads them raw, so only plain characters pass.
_PLAIN_ARGS = re.compile(r"[A-Za-z0-9_./:@=+,~%-]+(?: [A-Za-z0-9_./:@=+,~%-]+)*")


def _refuse(what: str) -> Refusal:
    return refuse.invalid(
        "canonical_text_unsure", f"{what} cannot be forwarded in a form the proxy is sure Spark reads like it does"
    )


def string_literal(value: str) -> str:
    """A Spark string literal for `value` (default escaping, as sqlglot renders it)."""
    return exp.Literal.string(value).sql("spark")


def identifier(value: str) -> str:
    """`value` as a backtick-quoted identifier."""
    return "`" + value.replace("`", "``") + "`"


def render_tokens(tokens: list[Token], what: str) -> str:
    """Tokens joined back with single spaces: words, numbers, quoted strings and identifiers
    and plain punctuation only (no operator that could begin a comment), no comments."""
    out: list[str] = []
    glue = False  # the last piece was a dot: the next one joins it
    for token in tokens:
        kind, text = token.token_type, token.text
        if kind in (TokenType.STRING, TokenType.RAW_STRING):
            piece = string_literal(text)
        elif kind == TokenType.IDENTIFIER:
            piece = identifier(text)
        elif kind in _PUNCTUATION:
            piece = _PUNCTUATION[kind]
        elif _WORD.fullmatch(text) or _NUMBER.fullmatch(text):
            piece = text
        else:
            raise _refuse(f"{what} with {text!r}")
        if out and (piece == "." or glue):
            out[-1] += piece
        else:
            out.append(piece)
        glue = piece == "."
    return " ".join(out)


def show_text(tokens: list[Token], sql: str) -> str:
    """`SHOW ...`: sqlglot reads the rest of a SHOW as one string; it is tokenized here."""
    rest = sql[tokens[0].end + 1 :]
    try:
        rest_tokens = _SPARK.tokenize(rest)
    except SqlglotError:
        raise _refuse("a SHOW statement") from None
    ends = [i for i, t in enumerate(rest_tokens) if t.token_type == TokenType.SEMICOLON]
    if ends:
        if any(t.token_type != TokenType.SEMICOLON for t in rest_tokens[ends[0] :]):
            raise _refuse("several statements")
        rest_tokens = rest_tokens[: ends[0]]
    return render_tokens([tokens[0], *rest_tokens], "a SHOW statement")


def set_text(pairs: tuple[tuple[str, str | None], ...]) -> str:
    """`SET`, `SET -v`, `SET key` or `SET key=value` for what `text_statements.parse_set` read.

    Spark reads the text after SET raw (SparkSqlAstBuilder), so a value is passed as read;
    one that does not read back the same way is refused.
    """
    if not pairs:
        return "SET"
    if len(pairs) != 1:
        raise _refuse("a SET statement")
    key, value = pairs[0]
    if key == "-v" and value is None:
        return "SET -v"
    shown = key if _KEY.fullmatch(key) else identifier(key)
    if value is None:
        return f"SET {shown}"
    if value != value.strip() or ";" in value or "\n" in value or "\r" in value:
        raise _refuse("a SET value spanning lines or statements")
    return f"SET {shown}={value}"


def reset_text(keys: tuple[str, ...]) -> str:
    if not keys:
        return "RESET"
    (key,) = keys
    return f"RESET {key if _KEY.fullmatch(key) else identifier(key)}"


def plain_args_text(head: str, sql: str, after: int, what: str) -> str:
    """`LIST FILES a b` / `ADD JAR p`: Spark reads the arguments raw; only plain ones pass."""
    rest = " ".join(sql[after:].split())
    if rest.endswith(";"):
        rest = rest.rstrip(";").rstrip()
    if not rest:
        return head
    if _PLAIN_ARGS.fullmatch(rest):
        return f"{head} {rest}"
    try:
        tokens = _SPARK.tokenize(rest)
    except SqlglotError:
        raise _refuse(what) from None
    if not tokens or any(t.token_type != TokenType.STRING for t in tokens):
        raise _refuse(what)
    return " ".join((head, *(string_literal(t.text) for t in tokens)))


@lru_cache(maxsize=2048)
def is_canonical_view_text(text: str) -> bool:
    """Whether Spark reads a stored view text like the proxy does.

    True for exactly what the proxy would render for it (a view created through the proxy
    before issue #22), and for a text Spark's lexer reads into the same tokens as sqlglot's
    (`splice.lexer_safe`: a view created through the proxy now stores the client's text with
    its names pinned). Any other text may be read by Spark differently from sqlglot, so it is
    expanded by the proxy, never left to Spark's reading.
    """
    from rowgate.rewrite.sql.splice import lexer_safe, parse_with_spans
    from rowgate.rewrite.sql.wrap import render

    try:
        tokens = spark_strings(_SPARK.tokenize(text), text)
        trees = parse_with_spans(tokens, text)
    except (SqlglotError, RecursionError):
        return False
    return len(trees) == 1 and (lexer_safe(text, tokens) is None or render(trees[0]) == text)


def text_statement(statement: TextStatement, tokens: list[Token], sql: str) -> str:
    """The proxy's text for a statement `text_statements.classify_text` read (a `TextStatement`).

    The proxy's own policy statements are answered by the pipeline, never forwarded, and
    keep their text.
    """
    kind = statement.kind
    words = [t.text.upper() if t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) else "" for t in tokens[:3]]
    words += [""] * (3 - len(words))
    if kind == "row_access_policy":
        return sql
    if kind == "set":
        if words[1:3] == ["TIME", "ZONE"]:
            return "SET TIME ZONE " + render_tokens(tokens[3:], "SET TIME ZONE")
        if words[1] in ("ROLE", "COLLATION"):
            return render_tokens(tokens, f"SET {words[1]}")
        return set_text(statement.effects.config_set)
    if kind == "reset":
        return reset_text(statement.effects.config_reset)
    if kind == "use" and words[1] == "CATALOG":
        # A string literal: every Spark from 3.4 reads it as the catalog's name, while 4.3
        # reads an identifier there as an expression (a column, UNRESOLVED_COLUMN).
        # text_statements sets the catalog of every USE/SET CATALOG it does not refuse, and a
        # refused one is raised (`Run.unanalysable`) before its text is asked for.
        return "SET CATALOG " + string_literal(cast(str, statement.effects.current_catalog))
    if kind == "cache" and words[:2] == ["CLEAR", "CACHE"]:
        return "CLEAR CACHE"
    if kind in ("command", "list_resources") and words[0] == "LIST" and len(tokens) > 1:
        return plain_args_text(f"LIST {words[1]}", sql, tokens[1].end + 1, "a LIST statement")
    if kind == "show":
        return show_text(tokens, sql)
    if kind == "add_resource":
        head = " ".join(tokens[0].text.upper().split())
        return plain_args_text(head, sql, tokens[0].end + 1, f"an {head} statement")
    raise _refuse(f"a {kind.upper()} statement")


def spark_strings(tokens: list[Token], sql: str) -> list[Token]:
    """Tokens with Spark's reading of a doubled quote inside a string literal.

    Spark reads `'it''s'` (and `"a""b"`) as one literal holding a quote; sqlglot's Spark
    tokenizer reads two adjacent literals, which it concatenates: `its`. Two string tokens
    that touch, the second opening with the same quote, are merged back into one.

    >>> from sqlglot.dialects.spark import Spark
    >>> text = "SELECT 'it''s', 'a' 'b', ''''"
    >>> [t.text for t in spark_strings(Spark().tokenize(text), text)]
    ['SELECT', "it's", ',', 'a', 'b', ',', "'"]
    """
    out: list[Token] = []
    for token in tokens:
        last = out[-1] if out else None
        if (
            last is not None
            and token.token_type == TokenType.STRING
            and last.token_type == TokenType.STRING
            and token.start == last.end + 1
            and sql[last.end : last.end + 1] == sql[token.start : token.start + 1]
            and sql[last.end : last.end + 1] in ("'", '"')
            and sql[last.start : last.start + 1] == sql[last.end : last.end + 1]
        ):
            quote = sql[token.start]
            merged = Token(
                TokenType.STRING,
                last.text + quote + token.text,
                line=last.line,
                col=last.col,
                start=last.start,
                end=token.end,
                comments=[*last.comments, *token.comments],
            )
            out[-1] = merged
        else:
            out.append(token)
    return _spaced_hex(out, sql)


# Words before a parenthesised property list, where `key 'value'` is a key and its value.
_PROPERTY_LISTS = frozenset({"OPTIONS", "TBLPROPERTIES", "DBPROPERTIES", "SERDEPROPERTIES", "PROPERTIES"})


def _spaced_hex(tokens: list[Token], sql: str) -> list[Token]:
    """Tokens with Spark's reading of `X 'F0'`: a binary literal, like `X'F0'`.

    Spark reads a word followed by a string as a typed literal (`DATE '2024-01-01'`), and
    the word `X` as the binary type; sqlglot reads `X'F0'` as a hex literal only when the
    two touch. A `X`/`x` word followed, after plain whitespace only, by a single-quoted
    string is merged into one hex string token, except where Spark reads a word and a
    string as something else: after a dot (a column `t.x`), inside a property list
    (`OPTIONS (x 'v')`) and in SHOW statements (`SHOW TABLES IN x 'pattern'`).

    >>> from sqlglot.dialects.spark import Spark
    >>> text = "SELECT X 'F0', x'1f', t.x 'a'"
    >>> [(t.token_type.name, t.text) for t in spark_strings(Spark().tokenize(text), text)][1:4]
    [('HEX_STRING', 'F0'), ('COMMA', ','), ('HEX_STRING', '1f')]
    """
    if not tokens or tokens[0].text.upper() == "SHOW":
        return tokens
    out: list[Token] = []
    openers: list[str] = []  # the word before each open parenthesis
    for i, token in enumerate(tokens):
        kind = token.token_type
        last = out[-1] if out else None
        if kind == TokenType.L_PAREN:
            openers.append(tokens[i - 1].text.upper() if i else "")
        elif kind == TokenType.R_PAREN and openers:
            openers.pop()
        if (
            kind == TokenType.STRING
            and last is not None
            and last.token_type == TokenType.VAR
            and last.text in ("X", "x")
            and sql[last.start : last.end + 1] == last.text
            and sql[token.start : token.start + 1] == "'"
            and last.end + 1 < token.start
            and sql[last.end + 1 : token.start].strip(" \t\r\n") == ""
            and (len(out) < 2 or out[-2].token_type != TokenType.DOT)
            and not (openers and openers[-1] in _PROPERTY_LISTS)
        ):
            out[-1] = Token(
                TokenType.HEX_STRING,
                token.text,
                line=last.line,
                col=last.col,
                start=last.start,
                end=token.end,
                comments=[*last.comments, *token.comments],
            )
        else:
            out.append(token)
    return out


def parse_like_spark(text: str) -> list[exp.Expr]:
    """sqlglot's parse of `text` with Spark's string literals (`spark_strings`) and the
    proxy's parser (`splice.parse_with_spans`: also `a >>> b`); raises."""
    from rowgate.rewrite.sql.splice import parse_with_spans

    return parse_with_spans(spark_strings(_SPARK.tokenize(text), text), text)
