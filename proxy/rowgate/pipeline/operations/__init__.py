"""Operations: what the proxy remembers about an operation between its RPCs.

An ExecutePlan continues on ReattachExecute, ReleaseExecute and GetStatus; what the proxy
answered or filtered the first time decides what it says later (steps.py with the memories
filtered.py, local.py, operations/release_acks.py). Streaming queries and checkpoints started over
protected tables are remembered per session (operations/streaming_queries.py, operations/stale_streams.py,
operations/checkpoint_owners.py).
"""
