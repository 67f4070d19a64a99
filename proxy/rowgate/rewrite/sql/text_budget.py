"""How much SQL text one request may ask the proxy to read.

Parsing and rewriting cost time linear in the text (sqlglot reads ~300 KB of SQL a second
on one core, and renders at about the same speed), and that time is spent in the proxy on
the caller's behalf. A request's distinct texts are charged against one budget (every `rewrite_sql`
the request causes that is not answered from memory: its statements, DataFrame expression
strings, view bodies it expands): past it the request is refused while tables are
protected, naming the bound and the flag that sets it. With nothing protected, the text the
proxy cannot afford to read is forwarded untouched like any text it cannot parse (only what
the settings allow list must see is refused then, `rewriter._unreadable`).

A budget object is made per request by the pipeline; a context without one is unbounded
(unit tests, the admin API's dry run).

>>> b = TextBudget(10)
>>> b.charge("SELECT")
True
>>> b.charge("SELECT")
True
>>> b.charge("SELECT 1")
False
>>> b.used
14
"""

from __future__ import annotations

DEFAULT_MAX_SQL_KIB = 1024


class TextBudget:
    """The characters of SQL one request may have read; `charge` says whether it still fits."""

    def __init__(self, limit_chars: int):
        self.limit_chars = limit_chars
        self.used = 0
        self._seen: set[str] = set()

    def charge(self, text: str) -> bool:
        """Count `text` once per request (a text read again, e.g. by the second opinion, is free)."""
        if text not in self._seen:
            self._seen.add(text)
            self.used += len(text)
        return self.used <= self.limit_chars

    def refusal_text(self) -> str:
        kib = self.limit_chars // 1024
        return (
            f"the SQL text of this request is over {kib} KiB, more than rowgate reads for one request "
            f"(--max-sql-kib {kib}); split the statement or ask the operator to raise the bound"
        )
