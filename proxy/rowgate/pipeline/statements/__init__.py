"""Statements the proxy runs or guards itself, before any plan is rewritten.

Row access policy statements are executed by the proxy and never reach Spark
(statements/policy_statements.py); settings a caller may change (statements/guard_config.py, the Config RPC) and
code a caller ships to the cluster (shipped_code.py, artifacts and UDFs) are checked here.
"""
