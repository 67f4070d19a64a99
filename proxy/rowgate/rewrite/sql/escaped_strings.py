"""The string literals whose value `spark.sql.parser.escapedStringLiterals` changes.

Spark's lexer ends a string literal at the same place whatever the setting (a backslash
always keeps the next character inside the literal); the setting decides only the value:
off (the default), `\\n` is a newline and `\\d` is `d`; on, the backslash is kept. rowgate
reads every text with Spark's default (sqlglot unescapes like Spark's default) and renders
what it inserts the same way (`'it\\'s'`). So a literal without a backslash means the same
under both values, and one with a backslash means what rowgate read only under the default.

The pipeline (proxy/rowgate/pipeline/enforce/string_literal_mode.py) compares the escaped literals
of the client's texts with those of the texts Spark receives: equal, and rowgate decided
nothing on their values, and Spark reads the client's own literals under either value.

>>> escaped_literals("SELECT 'a\\\\b', \\"c\\", r'd\\\\e', 'f' FROM t -- '\\\\'")
("'a\\\\b'", "r'd\\\\e'")
>>> escaped_literals("SELECT 'plain', \\"it's\\"")
()
"""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

_SPARK = Dialect.get_or_raise("spark")
_STRINGS = frozenset({TokenType.STRING, TokenType.RAW_STRING, TokenType.NATIONAL_STRING, TokenType.UNICODE_STRING})
UNREADABLE = ("<a text rowgate cannot tokenise, holding a backslash>",)


def escaped_literals(text: str) -> tuple[str, ...]:
    """The source text of every string literal in `text` that holds a backslash, in order.

    A text sqlglot cannot tokenise counts as one such literal when it holds a backslash
    anywhere (`UNREADABLE`): never read as free of them."""
    if "\\" not in text:
        return ()
    try:
        tokens = _SPARK.tokenize(text)
    except SqlglotError:
        return UNREADABLE
    found = []
    for token in tokens:
        raw = text[token.start : token.end + 1]
        if token.token_type in _STRINGS and "\\" in raw:
            found.append(raw)
    return tuple(found)
