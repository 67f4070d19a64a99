"""The request path: resolve caller -> inspect/rewrite request -> forward or answer locally.

Every RPC the proxy serves goes through one `Pipeline` (core.py), whose steps app.py lists
in order. A step declares the RPCs it handles and the facts (`Facts`) it reads and writes;
the pipeline checks when it is built that each fact is written before it is read. A step
sees a `Call` (the caller, the decoded request, the session it targets, the facts so far)
and may change the request in place, answer it itself by returning an `Answer`, or refuse
it by raising `Refusal`. When no step answers, the transport forwards the (possibly
rewritten) request upstream. Steps never touch gRPC.
"""
