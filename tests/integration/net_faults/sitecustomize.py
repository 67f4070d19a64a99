"""Test-only faults for tests/integration/test_net_every_execution.py; never shipped.

Python imports `sitecustomize` at start-up, before `rowgate.cli` builds the proxy.

- ROWGATE_TEST_UNREAD_MARKER: every plan whose text mentions that word is not rewritten at
  all: forwarded as the client sent it, reported as a query that reads nothing protected
  (a SQL text is reported as `sql:query`). The worst reading mistake the rewriter could make;
  only Spark's second opinion stands between such a plan and the protected rows.
- ROWGATE_TEST_PAUSE_DIR (with the marker): after the second opinion decided on an
  ExecutePlan whose text mentions the marker (whether it passed or raised), the proxy creates
  `<dir>/checked` and waits until `<dir>/go` exists, so a test can change state between the
  check and the run.
"""

import os

_MARKER = os.environ.get("ROWGATE_TEST_UNREAD_MARKER", "").lower()
_PAUSE = os.environ.get("ROWGATE_TEST_PAUSE_DIR", "")

if _MARKER:
    from rowgate.pipeline.enforce import enforcement as enforce
    from rowgate.rewrite.sql.result import RewriteResult

    _rewrite = enforce.rewrite_plans

    def _unread_rewrite(plan, ctx, findings):
        if _MARKER not in str(plan).lower():
            return _rewrite(plan, ctx, findings)
        text = str(plan)
        if "sql_command" in text or "sql {" in text:
            findings.kinds.add("sql:query")
            findings.sql_results.append(RewriteResult(sql="", statement_kind="query"))
        return None

    enforce.rewrite_plans = _unread_rewrite

if _MARKER and _PAUSE:
    import asyncio
    from pathlib import Path

    from rowgate.pipeline.enforce import second_opinion

    _check = second_opinion.SecondOpinion.check

    async def _paused_check(self, call, ctx, snapshot, findings):
        try:
            return await _check(self, call, ctx, snapshot, findings)
        finally:
            if call.method.name == "ExecutePlan" and _MARKER in str(call.request.plan).lower():
                Path(_PAUSE, "checked").touch()
                for _ in range(1200):
                    if Path(_PAUSE, "go").exists():
                        break
                    await asyncio.sleep(0.1)

    second_opinion.SecondOpinion.check = _paused_check
