"""The request path: resolve caller -> inspect/rewrite request -> forward or answer locally.

Every RPC the proxy serves goes through one `Pipeline` (core.py), whose steps assembly.py
lists in order. A step declares the RPCs it handles and the facts (`Facts`) it reads and
writes; the pipeline checks when it is built that each fact is written before it is read.
A step sees a `Call` (the caller, the decoded request, the session it targets, the facts so
far) and may change the request in place, answer it itself by returning an `Answer`, or
refuse it by raising `Refusal`. When no step answers, the transport forwards the (possibly
rewritten) request upstream. Steps never touch gRPC.

The sub-packages follow a request, and import only downwards in this order:
  enforce/     every plan rewritten for its caller, then checked; rules/ (a new rule goes there)
  statements/  what the proxy runs or guards itself: policy statements, settings, shipped code
  operations/  what the proxy remembers per operation, between its RPCs
  session/     what the proxy knows of each session, and the order of its requests
core.py (the types) and dependency_errors.py are below all of them; assembly.py above.
"""
