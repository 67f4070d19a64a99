"""Row access policy statements: recognised and parsed here, executed by the proxy, never by Spark.

Spark has no such statements, so anything that *starts* like one must be answered by the
proxy: parsed completely, or refused with an error that points at the mistake. Forwarding a
half-understood statement to Spark, or treating it as a no-op, would silently leave a table
unprotected. The parser works on sqlglot's Spark tokens (so comments, quoting and string
escapes follow Spark's rules) with a small recursive-descent grammar on top.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from rowgate.identity.members import MemberError, parse_member
from rowgate.policy.filter_check import FilterInvalid, check_filter

TableRef = tuple[str, ...]
"""A table as written: 1-3 unquoted parts. Resolving it to catalog.schema.table needs the session."""

ALL_AUTHENTICATED = "allAuthenticatedUsers"


@dataclass(frozen=True)
class CreatePolicy:
    name: str
    table: TableRef
    grantees: tuple[str, ...]
    filter_sql: str
    replace: bool = False
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropPolicy:
    name: str
    table: TableRef
    if_exists: bool = False


@dataclass(frozen=True)
class DropAllPolicies:
    table: TableRef


@dataclass(frozen=True)
class ShowPolicies:
    table: TableRef | None = None


@dataclass(frozen=True)
class ShowPolicyHistory:
    """`SHOW ROW ACCESS POLICY HISTORY [ON t]`: every recorded policy change (rowgate's own)."""

    table: TableRef | None = None


PolicyStatement = CreatePolicy | DropPolicy | DropAllPolicies | ShowPolicies | ShowPolicyHistory


class PolicyDdlError(ValueError):
    """A statement that starts like policy DDL but is not valid; `position` is (line, column), 1-based."""

    def __init__(self, message: str, position: tuple[int, int]):
        self.message = message
        self.position = position
        super().__init__(f"line {position[0]}, column {position[1]}: {message}")


# --- cheap recognition -------------------------------------------------------------------------


def looks_like_policy_ddl(sql: str) -> bool:
    """Whether `sql` must be handled by the proxy as policy DDL.

    Runs on every SQL string, so it scans only the first few words by hand instead of
    tokenising the statement; comments (nested ones too) are skipped the way Spark skips them,
    so a leading comment cannot smuggle a policy statement past the proxy to Spark.
    """
    words = _leading_words(sql, 5)
    if not words:
        return False
    head, rest = words[0], words[1:]
    if head == "CREATE":
        if rest[:2] == ["OR", "REPLACE"]:
            rest = rest[2:]
    elif head == "DROP":
        if rest[:1] == ["ALL"]:
            rest = rest[1:]
    elif head != "SHOW":
        return False
    return rest[:2] == ["ROW", "ACCESS"]


def _leading_words(sql: str, limit: int) -> list[str]:
    words: list[str] = []
    i, n = 0, len(sql)
    while i < n and len(words) < limit:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
            if i < 0:
                return words
        elif c.isalpha():
            j = i
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            words.append(sql[i:j].upper())
            i = j
        else:
            break
    return words


def _skip_block_comment(sql: str, i: int) -> int:
    """Offset after the (possibly nested) comment opening at `i`; -1 if it never closes."""
    depth, n = 0, len(sql)
    while i < n:
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return -1


# --- parsing -----------------------------------------------------------------------------------


class _Tokenizer(Spark.Tokenizer):
    # Spark's tokenizer swallows everything after SHOW/EXECUTE/... into one string token;
    # this grammar needs the words.
    COMMANDS: ClassVar[set[TokenType]] = set()


_SPARK = Spark()
_QUOTED = {TokenType.IDENTIFIER, TokenType.STRING, TokenType.RAW_STRING}
_RESERVED_NAMES = {"ON", "GRANT", "FILTER"}  # unquoted, these would make the grammar ambiguous


def parse_policy_ddl(sql: str) -> PolicyStatement:
    """Parse one policy statement, or raise `PolicyDdlError` saying what was expected where."""
    return _Parser(sql).statement()


class _Parser:
    def __init__(self, sql: str):
        self.sql = sql
        self._line_starts = [0] + [i + 1 for i, c in enumerate(sql) if c == "\n"]
        self.tokens = self._tokenize()
        self.i = 0

    # -- infrastructure

    def _tokenize(self) -> list[Token]:
        tokenizer = _Tokenizer(dialect=_SPARK)
        try:
            return tokenizer.tokenize(self.sql)
        except TokenError:
            start = getattr(getattr(tokenizer, "_core", None), "_start", None)
            if not isinstance(start, int):
                start = 0
            what = {"'": "string", '"': "string", "`": "quoted identifier"}.get(
                self.sql[start : start + 1], "comment" if self.sql.startswith("/*", start) else "token"
            )
            raise PolicyDdlError(f"unterminated {what}", self._pos(start)) from None

    def _pos(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def _end_offset(self) -> int:
        return self.tokens[-1].end + 1 if self.tokens else len(self.sql)

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def fail(self, expected: str, ahead: int = 0) -> PolicyDdlError:
        token = self.peek(ahead)
        if token is None:
            return PolicyDdlError(f"expected {expected}, found end of statement", self._pos(self._end_offset()))
        return PolicyDdlError(f"expected {expected}, found {_show(token)}", self._pos(token.start))

    def error_at(self, token: Token | None, message: str) -> PolicyDdlError:
        return PolicyDdlError(message, self._pos(token.start if token is not None else self._end_offset()))

    def is_type(self, token_type: TokenType, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t is not None and t.token_type == token_type

    def is_word(self, word: str, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t is not None and t.token_type not in _QUOTED and t.text.upper() == word

    def accept(self, *words: str) -> bool:
        if all(self.is_word(w, k) for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        for k, w in enumerate(words):
            if not self.is_word(w, k):
                raise self.fail(" ".join(words[k:]), k)
        self.i += len(words)

    def expect_type(self, kind: TokenType, expected: str) -> Token:
        t = self.peek()
        if t is None or t.token_type != kind:
            raise self.fail(expected)
        self.i += 1
        return t

    # -- grammar

    def statement(self) -> PolicyStatement:
        if self.accept("CREATE"):
            stmt: PolicyStatement = self.create()
        elif self.accept("DROP"):
            stmt = self.drop()
        elif self.accept("SHOW"):
            stmt = self.show()
        else:
            raise self.fail("CREATE, DROP or SHOW ROW ACCESS POLICY")
        self.end()
        return stmt

    def create(self) -> CreatePolicy:
        replace = self.accept("OR")
        if replace:
            self.expect("REPLACE")
        self.expect("ROW", "ACCESS", "POLICY")
        if_not_exists = False
        if self.is_word("IF") and self.is_word("NOT", 1):
            if replace:
                raise self.error_at(self.peek(), "OR REPLACE and IF NOT EXISTS cannot be combined")
            self.expect("IF", "NOT", "EXISTS")
            if_not_exists = True
        name = self.identifier("policy name")
        self.expect("ON")
        table = self.table()
        grantees: tuple[str, ...] = (ALL_AUTHENTICATED,)
        if self.is_word("GRANT"):
            self.expect("GRANT", "TO")
            grantees = self.grantees()
        elif not self.is_word("FILTER"):
            raise self.fail("GRANT TO or FILTER USING")
        self.expect("FILTER", "USING")
        return CreatePolicy(name, table, grantees, self.filter(), replace, if_not_exists)

    def drop(self) -> DropPolicy | DropAllPolicies:
        if self.accept("ALL"):
            self.expect("ROW", "ACCESS", "POLICIES")
            self.expect("ON")
            return DropAllPolicies(self.table())
        self.expect("ROW", "ACCESS")
        if self.is_word("POLICIES"):
            raise self.error_at(
                self.peek(), "expected POLICY, found 'POLICIES' (DROP ALL ROW ACCESS POLICIES drops every policy)"
            )
        self.expect("POLICY")
        if_exists = self.is_word("IF") and self.is_word("EXISTS", 1)
        if if_exists:
            self.i += 2
        name = self.identifier("policy name")
        self.expect("ON")
        return DropPolicy(name, self.table(), if_exists)

    def show(self) -> ShowPolicies | ShowPolicyHistory:
        self.expect("ROW", "ACCESS")
        singular = self.peek()
        if self.accept("POLICY"):
            if not self.accept("HISTORY"):
                after = self.peek()
                found = _show(after) if after is not None else "end of statement"
                raise self.error_at(singular, f"expected POLICIES or POLICY HISTORY after ROW ACCESS, found POLICY {found}")
            return ShowPolicyHistory(self.optional_table())
        self.expect("POLICIES")
        return ShowPolicies(self.optional_table())

    def optional_table(self) -> TableRef | None:
        if self.accept("ON"):
            return self.table()
        if self.peek() is not None and not self.is_type(TokenType.SEMICOLON):
            raise self.fail("ON <table> or end of statement")
        return None

    def end(self) -> None:
        t = self.peek()
        if t is not None and t.token_type == TokenType.SEMICOLON:
            self.i += 1
            extra = self.peek()
            if extra is not None:
                raise self.error_at(extra, f"only one statement is allowed, found {_show(extra)} after ';'")
            return
        if t is not None:
            raise self.fail("end of statement")

    def identifier(self, what: str) -> str:
        t = self.peek()
        if t is None:
            raise self.fail(what)
        if t.token_type == TokenType.IDENTIFIER:
            if not t.text:
                raise self.error_at(t, f"{what} may not be empty")
        elif not (_is_bare_word(t.text) and t.token_type not in _QUOTED) or t.text.upper() in _RESERVED_NAMES:
            raise self.fail(what)
        self.i += 1
        return t.text

    def table(self) -> TableRef:
        parts = [self.identifier("table name")]
        while self.is_type(TokenType.DOT):
            dot = self.peek()
            self.i += 1
            if len(parts) == 3:
                raise self.error_at(dot, "a table name has at most 3 parts (catalog.schema.table)")
            parts.append(self.identifier("table name part after '.'"))
        return tuple(parts)

    def grantees(self) -> tuple[str, ...]:
        self.expect_type(TokenType.L_PAREN, "'(' before the grantee list")
        found: list[str] = []
        while True:
            t = self.peek()
            if t is None or t.token_type not in (TokenType.STRING, TokenType.RAW_STRING):
                raise self.fail("a grantee string such as 'user:alice@example.com'")
            self.i += 1
            member = _canonical_member(t.text.strip(), lambda msg, t=t: self.error_at(t, msg))
            if member not in found:
                found.append(member)
            if self.is_type(TokenType.COMMA):
                self.i += 1
                continue
            self.expect_type(TokenType.R_PAREN, "',' or ')' in the grantee list")
            return tuple(found)

    def filter(self) -> str:
        open_ = self.expect_type(TokenType.L_PAREN, "'(' after FILTER USING")
        depth = 1
        while True:
            t = self.peek()
            if t is None:
                raise self.error_at(open_, "unbalanced parentheses: this '(' is never closed")
            self.i += 1
            if t.token_type == TokenType.SEMICOLON:
                raise self.error_at(t, "';' is not allowed inside the filter")
            if t.token_type == TokenType.L_PAREN:
                depth += 1
            elif t.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    close = t
                    break
        raw = self.sql[open_.end + 1 : close.start]
        text = raw.strip()
        if self.tokens[self.i - 2] is open_:  # nothing but whitespace and comments inside
            raise self.error_at(close, "empty filter: FILTER USING needs a boolean expression")
        start = open_.end + 1 + (len(raw) - len(raw.lstrip()))
        try:
            check_filter(text)
        except FilterInvalid as e:
            raise PolicyDdlError(e.message, self._pos(start + e.offset)) from None
        return text


def _show(token: Token) -> str:
    if token.token_type == TokenType.STRING:
        return "string '" + token.text + "'"
    if token.token_type == TokenType.IDENTIFIER:
        return "`" + token.text + "`"
    return "'" + token.text + "'"


def _is_bare_word(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c == "_" for c in text) and not text.isdigit()


def _canonical_member(text: str, error: Callable[..., PolicyDdlError]) -> str:
    """The grantee in the one spelling stored and compared (domain lower-cased); `error(message)`
    is the parser's error to raise for an invalid one."""
    try:
        return parse_member(text).canonical()
    except MemberError as e:
        raise error(f"invalid grantee '{text}': {e}") from None
