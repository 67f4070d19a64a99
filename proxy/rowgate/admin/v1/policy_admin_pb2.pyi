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
