"""The proxy's side of the conversation with the Spark Connect server.

It sits below everything that talks to Spark (transport, pipeline, responses, catalog), so
the RPC table, the URL format and the channel have one home that never imports upward.
"""
