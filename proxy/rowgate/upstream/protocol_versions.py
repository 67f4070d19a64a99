"""Which fields of the Spark Connect protocol the proxy speaks (pyspark 4.3) older servers lack.

The proxy decodes requests with the newest protocol and may build parts of the message it
forwards (a filtered read, a pinned name). A server reads a field it does not know as
unknown and ignores it, so a rewrite that relied on a newer field would run on an older
server as if the field were not there. Upstreams from Spark 4.0 on are supported; this
table lists, per release, the fields of messages that existed before it, derived from the
protobuf descriptors of pyspark 4.0.5, 4.1.4, 4.2.1 and 4.3.0 (fields of messages new in a
release are reachable only through one of these). tests/unit/transport/test_protocol_versions.py
checks that every entry names a real field.

>>> newest()
(4, 3)
>>> since("spark.connect.Relation", "zip")
(4, 3)
>>> since("spark.connect.Relation", "read") is None
True
"""

from __future__ import annotations

from google.protobuf.message import Message

from rowgate.message_walk import set_fields

Version = tuple[int, int]

# The first release that reads `system.session.<view>` as the session temp view (4.0.5
# refuses it, REQUIRES_SINGLE_PART_NAMESPACE; 4.3.0 reads it; 4.1 and 4.2 were not checked
# and keep the one-part names, as 4.0 does).
TEMP_VIEW_NAMESPACE_SINCE: Version = (4, 3)

_ADDED: dict[str, dict[str, tuple[str, ...]]] = {
    "4.1": {
        "spark.connect.Command": ("pipeline_command",),
        "spark.connect.DataType": ("geography", "geometry", "time"),
        "spark.connect.ExecutePlanRequest.RequestOption": ("result_chunking_options",),
        "spark.connect.ExecutePlanResponse": ("pipeline_command_result", "pipeline_event_result", "pipeline_query_function_execution_signal"),
        "spark.connect.ExecutePlanResponse.ArrowBatch": ("chunk_index", "num_chunks_in_batch"),
        "spark.connect.Expression": ("direct_shuffle_partition_id",),
        "spark.connect.Expression.Literal": ("data_type", "time"),
        "spark.connect.FetchErrorDetailsResponse.SparkThrowable": ("breaking_change_info",),
        "spark.connect.GroupMap": ("transform_with_state_info",),
        "spark.connect.MlCommand": ("clean_cache", "create_summary", "get_cache_info", "get_model_size"),
        "spark.connect.MlCommand.Delete": ("evict_only",),
        "spark.connect.MlCommandResult.MlOperatorInfo": ("warning_message",),
        "spark.connect.MlRelation": ("model_summary_dataset",),
        "spark.connect.Plan": ("compressed_operation",),
        "spark.connect.Relation": ("chunked_cached_local_relation",),
        "spark.connect.SubqueryExpression": ("in_subquery_values",),
    },
    "4.2": {
        "spark.connect.Catalog": (
            "analyze_table", "create_database", "drop_database", "drop_table", "drop_view", "get_create_table_string",
            "get_table_properties", "list_partitions", "list_views", "truncate_table",
        ),
        "spark.connect.ExecutePlanResponse.ObservedMetrics": ("errors", "root_error_idx"),
        "spark.connect.PipelineAnalysisContext": ("flow_identifier",),
        "spark.connect.PipelineCommand": ("execute_output_flows",),
        "spark.connect.PipelineCommand.DefineFlow": ("auto_cdc_flow_details",),
        "spark.connect.PipelineCommand.DefineFlowQueryFunctionResult": ("flow_identifier",),
        "spark.connect.PipelineQueryFunctionExecutionSignal": ("flow_identifiers",),
        "spark.connect.Read.DataSource": ("source_name",),
        "spark.connect.Relation": ("nearest_by_join", "relation_changes"),
        "spark.connect.WriteOperation": ("with_schema_evolution",),
        "spark.connect.WriteOperationV2": ("with_schema_evolution",),
        "spark.connect.WriteStreamOperationStart": ("real_time_batch_duration",),
    },
    "4.3": {
        "spark.connect.DataType": ("timestamp_ltz_nanos", "timestamp_ntz_nanos"),
        "spark.connect.Expression.Literal": ("timestamp_ltz_nanos", "timestamp_ntz_nanos"),
        "spark.connect.PipelineCommand.DefineFlow.AutoCdcFlowDetails": ("track_history_column_list", "track_history_except_column_list"),
        "spark.connect.Relation": ("zip",),
    },
}  # fmt: skip

# RPCs of SparkConnectService by the release that added them (4.0 has the rest).
RPCS_SINCE: dict[str, Version] = {"CloneSession": (4, 1), "GetStatus": (4, 2)}


def parse_version(text: str) -> Version | None:
    """``"4.1.4"`` -> (4, 1); None for what does not start with two numbers."""
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return None


SINCE: dict[tuple[str, str], Version] = {
    (message, field): parse_version(release) or (0, 0)
    for release, messages in _ADDED.items()
    for message, fields in messages.items()
    for field in fields
}


def newest() -> Version:
    """The release of the protocol the proxy speaks."""
    return max(SINCE.values())


def since(message: str, field: str) -> Version | None:
    """The release that added `field` to `message`; None when 4.0 has it."""
    return SINCE.get((message, field))


def newer_fields(message: Message) -> set[tuple[str, str]]:
    """Every (message, field) set anywhere in `message` that Spark 4.0 does not know."""
    return {
        (field.containing_type.full_name, field.name)
        for field, _ in set_fields([message], into_maps=True)
        if (field.containing_type.full_name, field.name) in SINCE
    }
