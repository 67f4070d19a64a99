"""Test-only fault: `rowgate serve` started with this folder on PYTHONPATH forgets the row filter.

Python imports `sitecustomize` at start-up, before `rowgate.cli` builds the proxy. When
ROWGATE_TEST_MISSED_TABLE is set, every plan whose text mentions that name is forwarded as
the client sent it and reported as reading nothing protected: the kind of parser or name
resolution mistake the second opinion (proxy/rowgate/pipeline/enforce/second_opinion.py) is the net
under. Used by tests/integration/test_second_opinion.py and test_one_check_per_shape.py
only; never shipped.

When ROWGATE_TEST_REWRITES_TO names a file, the SQL text of every rewritten `spark.sql`
command is appended to it, one JSON string a line (what the proxy sends Spark).
"""

import json
import os

_MISSED = os.environ.get("ROWGATE_TEST_MISSED_TABLE", "").lower()

if _MISSED:
    from rowgate.pipeline.enforce import enforcement as enforce

    _rewrite = enforce.rewrite_plans

    _REWRITES_TO = os.environ.get("ROWGATE_TEST_REWRITES_TO", "")

    def _forgetful_rewrite(plan, ctx, findings):
        original = type(plan)()
        original.CopyFrom(plan)
        _rewrite(plan, ctx, findings)
        if _REWRITES_TO and plan.WhichOneof("op_type") == "command" and plan.command.HasField("sql_command"):
            command = plan.command.sql_command
            text = command.input.sql.query if command.HasField("input") else command.sql
            with open(_REWRITES_TO, "a") as out:
                out.write(json.dumps(text) + "\n")
        if _MISSED in str(original).lower():
            plan.CopyFrom(original)
            findings.filtered = False
            findings.tables_read = frozenset()
            findings.policies_applied = ()
            findings.sql_results.clear()

    enforce.rewrite_plans = _forgetful_rewrite
