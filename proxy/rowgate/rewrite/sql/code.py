"""SQL that runs code of the caller's choosing on the cluster.

`TRANSFORM (...) USING 'script'` runs a process on the executors and `reflect` /
`java_method` call any static Java method: either can open a protected table's files
directly. The rewriter only reports them; the operator's settings decide.

>>> import sqlglot
>>> code_in(sqlglot.parse_one("SELECT reflect('java.lang.System', 'getenv', 'HOME')", read="spark"))
('reflect',)
"""

from __future__ import annotations

from sqlglot import exp

REFLECTION = frozenset({"reflect", "java_method", "try_reflect"})


def code_in(stmt: exp.Expr) -> tuple[str, ...]:
    kinds: list[str] = []
    if next(stmt.find_all(exp.QueryTransform), None) is not None:
        kinds.append("transform")
    for func in stmt.find_all(exp.Anonymous):
        if func.name.strip("`").lower() in REFLECTION:
            kinds.append("reflect")
    return tuple(dict.fromkeys(kinds))
