"""Enforcement: every plan a request carries is rewritten for its caller, then checked.

enforcement.py orchestrates one plan-carrying request: rewrite (enforce/rewrite_context.py gives the
rewriters one caller, one session, one snapshot), merge the facts (enforce/findings.py), apply the
rules (rules/, one module per concern, listed in `RULES`: a new rule goes there), ask Spark
for a second opinion (enforce/second_opinion.py), then record what the request changed
(enforce/session_effects.py, enforce/policy_lifecycle.py).
"""
