"""The proxy accepts the keepalive pings pyspark sends, as Spark Connect does.

pyspark 4.3 pings every connection every 60 s, calls or not. With gRPC's server defaults the
proxy answered the third such ping with GOAWAY "too_many_pings" (seen with idle sessions of
pyspark's own test suites, scripts/pyspark_suites.py), dropping the connection under any
call still open on it; Spark directly never does.
"""

from __future__ import annotations

from pyspark.sql.connect.client.core import ChannelBuilder

from rowgate.transport.server import server_options


def test_pysparks_default_keepalive_is_within_what_the_server_permits():
    options = dict(server_options(1024))
    assert ChannelBuilder.GRPC_DEFAULT_KEEPALIVE_ENABLED
    assert ChannelBuilder.GRPC_DEFAULT_KEEPALIVE_WITHOUT_CALLS
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= ChannelBuilder.GRPC_DEFAULT_KEEPALIVE_TIME_MS


def test_message_limits_stay_the_configured_ones():
    options = dict(server_options(5 * 1024 * 1024))
    assert options["grpc.max_receive_message_length"] == options["grpc.max_send_message_length"] == 5 * 1024 * 1024
