"""Statements read from tokens, the way Spark reads them: SET, RESET, SET CATALOG, EXPLAIN,
SHOW, ADD/LIST resources and the proxy's own row access policy DDL.

Spark parses these by regular expression (SET/RESET) or sqlglot knows them only as an opaque
`Command`, so reading them from a sqlglot tree would not be reading what Spark reads. The
driver (rewriter.py) asks `classify_text` first; `None` means "parse it with sqlglot".
A `TextStatement` says what the statement is, what it changes in the session, and whether
it is refused under protection (`refusal`) or for non-admins (`admin_only`); it never
rewrites anything (canonical.py renders the proxy's own text of it).

>>> from sqlglot.dialects.spark import Spark
>>> t = classify_text(Spark().tokenize("SET spark.sql.ansi.enabled = false;"), "SET spark.sql.ansi.enabled = false;")
>>> t.kind, t.effects.config_set
('set', (('spark.sql.ansi.enabled', 'false'),))
>>> classify_text(Spark().tokenize("SHOW PARTITIONS t"), "SHOW PARTITIONS t").refusal
'SHOW PARTITIONS'
>>> classify_text(Spark().tokenize("SELECT 1"), "SELECT 1") is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from rowgate.rewrite.sql.result import NO_EFFECTS, SessionEffects


@dataclass(frozen=True)
class TextStatement:
    kind: str
    effects: SessionEffects = NO_EFFECTS
    explained_offset: int | None = None  # EXPLAIN: where the explained statement starts in the text
    explain_mode: str = ""  # EXPLAIN EXTENDED/CODEGEN/...: the mode, upper-cased
    refusal: str | None = None  # refuse with this message when protection is in force
    admin_only: str | None = None  # refuse non-admins with this message when protection is in force


_EXPLAIN_MODES = frozenset({"EXTENDED", "CODEGEN", "COST", "FORMATTED", "LOGICAL"})
# SHOW forms that list names or schemas only; every other SHOW is refused under protection
# (SHOW PARTITIONS lists data values, SHOW TBLPROPERTIES / TABLE EXTENDED carry statistics,
# SHOW CREATE TABLE is an opaque command for sqlglot).
_SAFE_SHOW = frozenset({"TABLES", "VIEWS", "DATABASES", "SCHEMAS", "NAMESPACES", "CATALOGS", "FUNCTIONS", "COLUMNS", "CURRENT"})
_SAFE_SHOW_PREFIXED = frozenset({"USER", "SYSTEM", "ALL"})  # SHOW USER FUNCTIONS ...

_KEY = r"[a-zA-Z_0-9\\.:]+"
_SET_KEY_VALUE = re.compile(rf"({_KEY})\s*=([^;]*);*", re.S)
_SET_KEY = re.compile(rf"({_KEY})")
_QUOTED_KEY = re.compile(r"`((?:[^`]|``)+)`\s*(?:=\s*(.*?))?\s*;*", re.S)
_RESET_KEY = re.compile(rf"({_KEY})\s*;*")


def _word(tokens: list[Token], i: int) -> str:
    if i >= len(tokens):
        return ""
    token = tokens[i]
    if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return ""  # quoted text is never a keyword
    return token.text.upper()


def _remainder(sql: str, token: Token) -> str:
    return sql[token.end + 1 :].strip()


def _unquote_key(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "`":
        return text[1:-1].replace("``", "`")
    return text


def parse_set(remainder: str) -> tuple[tuple[str, str | None], ...] | None:
    """Spark's reading of `SET <remainder>` (SparkSqlAstBuilder): () lists all, None if invalid.

    >>> parse_set("spark.sql.shuffle.partitions=4"), parse_set("a.b"), parse_set("`a b` = `v`")
    ((('spark.sql.shuffle.partitions', '4'),), (('a.b', None),), (('a b', 'v'),))
    """
    text = remainder.strip()
    if not text or text.strip(";").strip() == "":
        return ()
    if text == "-v":
        return (("-v", None),)
    m = _SET_KEY_VALUE.fullmatch(text)
    if m:
        return ((m.group(1), m.group(2).strip()),)
    m = _SET_KEY.fullmatch(text.rstrip(";").rstrip())
    if m:
        return ((m.group(1), None),)
    m = _QUOTED_KEY.fullmatch(text)
    if m:
        key = m.group(1).replace("``", "`")
        value = m.group(2)
        return ((key, _unquote_key(value) if value is not None else None),)
    if "=" in text:
        key, _, value = text.partition("=")
        m = _SET_KEY.fullmatch(key.strip())
        if m:
            return ((m.group(1), _unquote_key(value.strip().rstrip(";").strip())),)
    return None


def parse_reset(remainder: str) -> tuple[str, ...] | None:
    """Spark's reading of `RESET <remainder>`: () resets everything, None if invalid."""
    text = remainder.strip().rstrip(";").strip()
    if not text:
        return ()
    if _RESET_KEY.fullmatch(text):
        return (text,)
    if text.startswith("`") and text.endswith("`") and len(text) > 2:
        return (_unquote_key(text),)
    return None


_COMMAND_TOKENS = frozenset({TokenType.COMMAND, TokenType.SHOW, TokenType.EXECUTE, TokenType.FETCH, TokenType.RENAME})


def command_rest(tokens: list[Token], sql: str) -> tuple[str, int, str] | None:
    """For a statement sqlglot's tokenizer reads as a command (`EXPLAIN ...`, `SHOW ...`):
    its head keyword(s), and where the rest of its text starts and what it is."""
    if tokens[0].token_type not in _COMMAND_TOKENS:
        return None
    head = " ".join(tokens[0].text.upper().split())
    if len(tokens) < 2:
        return head, len(sql), ""
    rest = tokens[1].text
    after = tokens[0].end + 1
    tail = sql[after:]
    offset = after + (len(tail) - len(tail.lstrip()))
    if not sql.startswith(rest, offset):
        return None
    return head, offset, rest


def classify_text(tokens: list[Token], sql: str) -> TextStatement | None:
    """Statements read from tokens; None for everything sqlglot parses properly."""
    if not tokens:
        return None
    command = command_rest(tokens, sql)
    if command is not None:
        return _command(command, sql)
    if tokens[0].token_type in _COMMAND_TOKENS:
        return TextStatement("command", refusal=f"the {tokens[0].text.upper()} statement")
    w0, w1, w2 = (_word(tokens, i) for i in range(3))
    if _is_row_access_policy([w for w in (_word(tokens, i) for i in range(6))]):
        return TextStatement("row_access_policy")
    if w0 == "SET":
        if w1 in ("VAR", "VARIABLE"):
            return None
        if w1 == "CATALOG":
            if len(tokens) != 3 or tokens[2].token_type not in (TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING):
                return TextStatement("use", refusal="SET CATALOG with a name the proxy cannot read")
            catalog = tokens[2].text
            return TextStatement("use", SessionEffects(current_catalog=catalog, use_target=(catalog,)))
        if w1 == "TIME" and w2 == "ZONE":
            value = sql[tokens[2].end + 1 :].strip().rstrip(";").strip()
            return TextStatement("set", SessionEffects(config_set=(("spark.sql.session.timeZone", value),)))
        if w1 in ("ROLE", "COLLATION"):
            return TextStatement("set", SessionEffects(config_set=((w1.lower(), None),)))
        pairs = parse_set(_remainder(sql, tokens[0]))
        if pairs is None:
            return TextStatement("set", refusal="a SET statement the proxy cannot read")
        return TextStatement("set", SessionEffects(config_set=pairs))
    if w0 == "RESET":
        keys = parse_reset(_remainder(sql, tokens[0]))
        if keys is None:
            return TextStatement("reset", refusal="a RESET statement the proxy cannot read")
        return TextStatement("reset", SessionEffects(config_reset=keys, config_reset_all=not keys))
    if w0 == "CLEAR" and w1 == "CACHE" and len(tokens) == 2:
        return TextStatement("cache")
    if w0 == "LIST" and w1 in ("FILE", "FILES", "JAR", "JARS", "ARCHIVE", "ARCHIVES"):
        return TextStatement("list_resources")
    return None


def _command(command: tuple[str, int, str], sql: str) -> TextStatement:
    head, offset, rest = command
    try:
        rest_tokens = Dialect.get_or_raise("spark").tokenize(rest) if rest else []
    except Exception:  # noqa: BLE001 - untokenisable text is classified by its first word alone
        rest_tokens = []
    words = [_word(rest_tokens, i) for i in range(3)]
    if head == "EXPLAIN":
        if not rest_tokens:
            return TextStatement("explain", refusal="EXPLAIN without a statement the proxy can read")
        index = 1 if words[0] in _EXPLAIN_MODES else 0
        if index >= len(rest_tokens):
            return TextStatement("explain", refusal="EXPLAIN without a statement")
        return TextStatement(
            "explain", explained_offset=offset + rest_tokens[index].start, explain_mode=words[0] if index else ""
        )
    if head == "SHOW":
        if _is_row_access_policy(["SHOW", *words]):
            return TextStatement("row_access_policy")
        w1, w2, w3 = words
        safe = w1 in _SAFE_SHOW or (w1 in _SAFE_SHOW_PREFIXED and w2 == "FUNCTIONS")
        if w1 == "TABLES" and "EXTENDED" in (w2, w3):
            safe = False
        return TextStatement("show", refusal=None if safe else f"SHOW {w1 or '...'}")
    if head.startswith("ADD "):
        return TextStatement("add_resource", admin_only=f"{head} is reserved to admins while row access policies are in force")
    return TextStatement("command", refusal=f"the {head} statement")


def _is_row_access_policy(words: list[str]) -> bool:
    if words[:1] == ["CREATE"]:
        rest = words[3:6] if words[1:3] == ["OR", "REPLACE"] else words[1:4]
        return rest[:2] == ["ROW", "ACCESS"]
    if words[:1] == ["DROP"]:
        return words[1:3] == ["ROW", "ACCESS"] or words[1:4] == ["ALL", "ROW", "ACCESS"]
    if words[:1] == ["SHOW"]:
        return words[1:3] == ["ROW", "ACCESS"]
    return False
