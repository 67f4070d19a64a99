"""Sessions: what the proxy knows of each caller's Spark session, and the order of its requests.

A request is pinned to its caller (pin.py), its session's position and state version are
read (session/position.py, epoch.py) under the session's state gate (session/state_gate.py), a session met
first on this replica is learned from Spark (recall.py), and a new upstream session drops
what was known of the old one (upstream.py). registry.py holds the per-session memory.
"""
