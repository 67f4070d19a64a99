import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Policy(_message.Message):
    __slots__ = ("table_catalog", "table_schema", "table_name", "policy_name", "grantees", "filter_predicate", "creation_time", "last_modified_time")
    TABLE_CATALOG_FIELD_NUMBER: _ClassVar[int]
    TABLE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    GRANTEES_FIELD_NUMBER: _ClassVar[int]
    FILTER_PREDICATE_FIELD_NUMBER: _ClassVar[int]
    CREATION_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_MODIFIED_TIME_FIELD_NUMBER: _ClassVar[int]
    table_catalog: str
    table_schema: str
    table_name: str
    policy_name: str
    grantees: _containers.RepeatedScalarFieldContainer[str]
    filter_predicate: str
    creation_time: _timestamp_pb2.Timestamp
    last_modified_time: _timestamp_pb2.Timestamp
    def __init__(self, table_catalog: _Optional[str] = ..., table_schema: _Optional[str] = ..., table_name: _Optional[str] = ..., policy_name: _Optional[str] = ..., grantees: _Optional[_Iterable[str]] = ..., filter_predicate: _Optional[str] = ..., creation_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_modified_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListPoliciesRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("table", "policy_name")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    table: str
    policy_name: str
    def __init__(self, table: _Optional[str] = ..., policy_name: _Optional[str] = ...) -> None: ...

class CreatePolicyRequest(_message.Message):
    __slots__ = ("policy", "replace", "if_not_exists")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    replace: bool
    if_not_exists: bool
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., replace: _Optional[bool] = ..., if_not_exists: _Optional[bool] = ...) -> None: ...

class DropPolicyRequest(_message.Message):
    __slots__ = ("table", "policy_name", "if_exists")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    table: str
    policy_name: str
    if_exists: bool
    def __init__(self, table: _Optional[str] = ..., policy_name: _Optional[str] = ..., if_exists: _Optional[bool] = ...) -> None: ...

class DropPolicyResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: bool
    def __init__(self, dropped: _Optional[bool] = ...) -> None: ...

class ExplainAccessRequest(_message.Message):
    __slots__ = ("principal", "groups", "sql", "current_catalog", "current_schema")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_CATALOG_FIELD_NUMBER: _ClassVar[int]
    CURRENT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    principal: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    sql: str
    current_catalog: str
    current_schema: str
    def __init__(self, principal: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., sql: _Optional[str] = ..., current_catalog: _Optional[str] = ..., current_schema: _Optional[str] = ...) -> None: ...

class ExplainAccessResponse(_message.Message):
    __slots__ = ("rewritten_sql", "policies_applied", "tables_read", "row_filter_applied", "refusal", "refusal_code", "statement_kind")
    REWRITTEN_SQL_FIELD_NUMBER: _ClassVar[int]
    POLICIES_APPLIED_FIELD_NUMBER: _ClassVar[int]
    TABLES_READ_FIELD_NUMBER: _ClassVar[int]
    ROW_FILTER_APPLIED_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_CODE_FIELD_NUMBER: _ClassVar[int]
    STATEMENT_KIND_FIELD_NUMBER: _ClassVar[int]
    rewritten_sql: str
    policies_applied: _containers.RepeatedScalarFieldContainer[str]
    tables_read: _containers.RepeatedScalarFieldContainer[str]
    row_filter_applied: bool
    refusal: str
    refusal_code: str
    statement_kind: str
    def __init__(self, rewritten_sql: _Optional[str] = ..., policies_applied: _Optional[_Iterable[str]] = ..., tables_read: _Optional[_Iterable[str]] = ..., row_filter_applied: _Optional[bool] = ..., refusal: _Optional[str] = ..., refusal_code: _Optional[str] = ..., statement_kind: _Optional[str] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("version", "change_time", "author", "via", "detail", "action", "table", "policy_name", "before", "after")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_TIME_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    version: int
    change_time: _timestamp_pb2.Timestamp
    author: str
    via: str
    detail: str
    action: str
    table: str
    policy_name: str
    before: Policy
    after: Policy
    def __init__(self, version: _Optional[int] = ..., change_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., author: _Optional[str] = ..., via: _Optional[str] = ..., detail: _Optional[str] = ..., action: _Optional[str] = ..., table: _Optional[str] = ..., policy_name: _Optional[str] = ..., before: _Optional[_Union[Policy, _Mapping]] = ..., after: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class ListHistoryRequest(_message.Message):
    __slots__ = ("table", "after_version")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    table: str
    after_version: int
    def __init__(self, table: _Optional[str] = ..., after_version: _Optional[int] = ...) -> None: ...

class ListHistoryResponse(_message.Message):
    __slots__ = ("entries", "version", "history_since")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SINCE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    version: int
    history_since: int
    def __init__(self, entries: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ..., version: _Optional[int] = ..., history_since: _Optional[int] = ...) -> None: ...

class ApplyPoliciesRequest(_message.Message):
    __slots__ = ("policies", "prune", "dry_run")
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    prune: bool
    dry_run: bool
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ..., prune: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("to_version", "table", "dry_run")
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    to_version: int
    table: str
    dry_run: bool
    def __init__(self, to_version: _Optional[int] = ..., table: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PolicyChange(_message.Message):
    __slots__ = ("action", "before", "after")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    action: str
    before: Policy
    after: Policy
    def __init__(self, action: _Optional[str] = ..., before: _Optional[_Union[Policy, _Mapping]] = ..., after: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class ChangeResponse(_message.Message):
    __slots__ = ("changes", "unchanged", "version", "dry_run")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[PolicyChange]
    unchanged: int
    version: int
    dry_run: bool
    def __init__(self, changes: _Optional[_Iterable[_Union[PolicyChange, _Mapping]]] = ..., unchanged: _Optional[int] = ..., version: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("principal", "groups")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, principal: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class PreviewImpactRequest(_message.Message):
    __slots__ = ("create", "drop", "apply", "rollback", "principals")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DROP_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    create: CreatePolicyRequest
    drop: DropPolicyRequest
    apply: ApplyPoliciesRequest
    rollback: RollbackRequest
    principals: _containers.RepeatedCompositeFieldContainer[Principal]
    def __init__(self, create: _Optional[_Union[CreatePolicyRequest, _Mapping]] = ..., drop: _Optional[_Union[DropPolicyRequest, _Mapping]] = ..., apply: _Optional[_Union[ApplyPoliciesRequest, _Mapping]] = ..., rollback: _Optional[_Union[RollbackRequest, _Mapping]] = ..., principals: _Optional[_Iterable[_Union[Principal, _Mapping]]] = ...) -> None: ...

class ImpactRow(_message.Message):
    __slots__ = ("table", "principal", "groups", "rows_now", "rows_after")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ROWS_NOW_FIELD_NUMBER: _ClassVar[int]
    ROWS_AFTER_FIELD_NUMBER: _ClassVar[int]
    table: str
    principal: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    rows_now: int
    rows_after: int
    def __init__(self, table: _Optional[str] = ..., principal: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., rows_now: _Optional[int] = ..., rows_after: _Optional[int] = ...) -> None: ...

class PreviewImpactResponse(_message.Message):
    __slots__ = ("rows", "changes", "unchanged", "version")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[ImpactRow]
    changes: _containers.RepeatedCompositeFieldContainer[PolicyChange]
    unchanged: int
    version: int
    def __init__(self, rows: _Optional[_Iterable[_Union[ImpactRow, _Mapping]]] = ..., changes: _Optional[_Iterable[_Union[PolicyChange, _Mapping]]] = ..., unchanged: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...
