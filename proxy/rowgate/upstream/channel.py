"""The proxy's one channel to the Spark Connect server.

One HTTP/2 channel multiplexes every client's calls; gRPC reconnects it by itself when the
upstream comes back, so an upstream restart needs no action from the proxy. The client's
own credentials never travel on it: the upstream sees only the operator's token (if the
upstream URL carries one) and the metadata the proxy chose to forward.

The upstream's Spark version is asked once (AnalyzePlan `spark_version`, in a session of
the proxy's own) and kept while the channel stays connected: a channel that left READY may
reconnect to another server (an upgrade, a failover), so the version is asked again then.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2

from rowgate.upstream.methods import METHODS
from rowgate.upstream.protocol_versions import Version, parse_version
from rowgate.upstream.url import UpstreamUrl

# The proxy's own identity upstream for its version question: not a member's form
# (user:...), so no caller's pinned session can be this one.
VERSION_USER = "rowgate-internal"


class UpstreamVersionUnknown(Exception):
    """The upstream could not be asked for its version (or answered none)."""


class Upstream:
    def __init__(self, url: UpstreamUrl, *, max_message_bytes: int, ca_file: str | None = None):
        self.url = url
        self.max_message_bytes = max_message_bytes
        self.ca_file = ca_file
        self.channel: grpc.aio.Channel | None = None
        self._callables: dict[str, object] = {}
        extra: list[tuple[str, str]] = list(url.headers)
        if url.token:
            extra.append(("authorization", f"Bearer {url.token}"))
        self.extra_metadata: tuple[tuple[str, str], ...] = tuple(extra)
        self._version: tuple[str, Version] | None = None
        self._version_lock: asyncio.Lock | None = None
        self._version_session = str(uuid.uuid4())
        self._watcher: asyncio.Task | None = None

    def open(self) -> None:
        """Create the channel; must run inside the event loop that will use it."""
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # Reconnect quickly when a restarted upstream comes back.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2_000),
            ("grpc.enable_retries", 0),
        ]
        if self.url.use_ssl:
            roots = Path(self.ca_file).read_bytes() if self.ca_file else None
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self.channel = grpc.aio.secure_channel(self.url.target, creds, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(self.url.target, options=options)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # opened outside a loop: the version is then asked at every reconnect anyway
        if loop is not None:
            self._watcher = loop.create_task(self._watch(self.channel), name="rowgate-upstream-version")

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        self._version = None
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
            self._callables = {}

    def _callable(self, name: str) -> Any:
        # Multicallables are reusable; making one per request showed up in profiles.
        found = self._callables.get(name)
        if found is not None:
            return found
        method = METHODS[name]
        assert self.channel is not None, "Upstream.open() was not called"
        if method.client_streaming:
            found = self.channel.stream_unary(method.path)
        elif method.server_streaming:
            found = self.channel.unary_stream(method.path)
        else:
            found = self.channel.unary_unary(method.path)
        self._callables[name] = found
        return found

    def raw(self, name: str) -> Any:
        """A multicallable that sends and receives serialized bytes (no re-encoding): unary or
        streaming as `name`'s RPC is, so its type (untyped grpc's) depends on the name."""
        return self._callable(name)

    async def call(self, name: str, request: Message, *, timeout: float | None = 30.0) -> Any:
        """A typed unary call, for the proxy's own questions to the upstream; the answer is
        `name`'s response message (`METHODS[name].response_type`), so its type depends on the name."""
        method = METHODS[name]
        raw = await self._callable(name)(request.SerializeToString(), metadata=self.extra_metadata, timeout=timeout)
        return method.response_type.FromString(raw)

    async def server_side_session_id(self, session_id: str, user_id: str) -> str:
        """The upstream's id for (user_id, session_id), which pyspark checks on every response.

        A Config get creates the session upstream if it does not exist yet, which is what a
        real first request of the session would have done anyway.
        """
        request = base_pb2.ConfigRequest(
            session_id=session_id,
            user_context=base_pb2.UserContext(user_id=user_id, user_name=user_id),
            operation=base_pb2.ConfigRequest.Operation(
                get_option=base_pb2.ConfigRequest.GetOption(keys=["spark.sql.session.timeZone"])
            ),
        )
        response = await self.call("Config", request)
        return response.server_side_session_id

    # -- the upstream's version ------------------------------------------------------------

    async def spark_version(self) -> tuple[str, Version]:
        """The upstream's Spark version, as text ("4.1.4") and (major, minor); asked once per
        connection. Raises `UpstreamVersionUnknown` when it cannot be learned."""
        known = self._version
        if known is not None:
            return known
        if self._version_lock is None:
            self._version_lock = asyncio.Lock()
        async with self._version_lock:
            if self._version is None:
                self._version = await self._ask_version()
            return self._version

    async def _ask_version(self) -> tuple[str, Version]:
        request = base_pb2.AnalyzePlanRequest(
            session_id=self._version_session,
            user_context=base_pb2.UserContext(user_id=VERSION_USER, user_name=VERSION_USER),
            client_type="rowgate",
            spark_version=base_pb2.AnalyzePlanRequest.SparkVersion(),
        )
        try:
            response = await self.call("AnalyzePlan", request)
        except grpc.aio.AioRpcError as e:
            raise UpstreamVersionUnknown(f"{e.code().name}: {e.details()}") from e
        text = response.spark_version.version
        parsed = parse_version(text)
        if parsed is None:
            raise UpstreamVersionUnknown(f"the upstream answered the version {text!r}")
        return text, parsed

    def forget_version(self) -> None:
        self._version = None

    async def _watch(self, channel: grpc.aio.Channel) -> None:
        """Forgets the version whenever the channel leaves READY: what it reconnects to may be
        another server."""
        ready = grpc.ChannelConnectivity.READY
        state = channel.get_state(try_to_connect=False)
        while self._watcher is asyncio.current_task():  # until close() or another open()
            await channel.wait_for_state_change(state)
            new = channel.get_state(try_to_connect=False)
            if state == ready and new != ready:
                self._version = None
            state = new
