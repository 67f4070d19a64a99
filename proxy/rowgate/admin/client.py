"""A small synchronous client of the `rowgate.v1.PolicyAdmin` API (what the CLI uses).

Credentials travel as request metadata, exactly like a Spark Connect client's: a bearer
token (`authorization: Bearer ...`, for the jwt and token identity sources) or the trusted
headers `x-rowgate-user` / `x-rowgate-groups` (header source, only behind a trusted hop).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from rowgate.admin.policy_files import PolicySpec, parse_table
from rowgate.admin.v1 import policy_admin_pb2 as pb
from rowgate.admin.v1 import policy_admin_pb2_grpc as pb_grpc
from rowgate.policy.model import TableName

DEFAULT_PORT = 15002


class AdminError(Exception):
    """An RPC failed; `code` is the gRPC status, `message` the server's explanation."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def normalize_target(target: str) -> str:
    """`host:port`, `host` (port 15002) or a Spark Connect URL `sc://host:port/;...` -> `host:port`."""
    text = target.strip()
    if text.startswith("sc://"):
        text = text[len("sc://") :].split("/", 1)[0].split(";", 1)[0]
    if not text:
        raise ValueError(f"--target {target!r} names no host")
    if text.startswith("["):  # [::1]:15002
        return text if "]:" in text else f"{text}:{DEFAULT_PORT}"
    if text.count(":") == 1:
        host, port = text.split(":")
        if not host or not port.isdigit():
            raise ValueError(f"--target wants HOST:PORT, got {target!r}")
        return text
    if ":" in text:
        raise ValueError(f"--target wants HOST:PORT (IPv6 hosts in brackets), got {target!r}")
    return f"{text}:{DEFAULT_PORT}"


def credential_metadata(
    token: str | None = None, user: str | None = None, groups: Sequence[str] = ()
) -> tuple[tuple[str, str], ...]:
    if token and user:
        raise ValueError("give either a token or a user, not both")
    metadata: list[tuple[str, str]] = []
    if token:
        metadata.append(("authorization", f"Bearer {token}"))
    if user:
        metadata.append(("x-rowgate-user", user))
        if groups:
            metadata.append(("x-rowgate-groups", ",".join(groups)))
    elif groups:
        raise ValueError("groups are sent with a user (trusted headers); a token carries its own groups")
    return tuple(metadata)


def table_fields(policy: pb.Policy) -> TableName:
    return TableName(policy.table_catalog, policy.table_schema, policy.table_name)


def policy_proto(table: str | TableName, name: str, grantees: Sequence[str], filter_sql: str) -> pb.Policy:
    t = table if isinstance(table, TableName) else parse_table(table)
    return pb.Policy(
        table_catalog=t.catalog,
        table_schema=t.schema,
        table_name=t.table,
        policy_name=name,
        grantees=list(grantees),
        filter_predicate=filter_sql,
    )


def principals_proto(principals: Iterable[tuple[str, Sequence[str]]]) -> list[pb.Principal]:
    """(principal, groups) pairs as the Principal messages of a preview."""
    return [pb.Principal(principal=p, groups=list(groups)) for p, groups in principals]


def spec_from_proto(policy: pb.Policy) -> PolicySpec:
    return PolicySpec(table_fields(policy), policy.policy_name, tuple(policy.grantees), policy.filter_predicate)


def timestamp_text(ts: Timestamp) -> str:
    """RFC 3339 (UTC) for a google.protobuf.Timestamp; empty when unset."""
    if not ts.seconds and not ts.nanos:
        return ""
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


class AdminClient:
    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        user: str | None = None,
        groups: Sequence[str] = (),
        tls_ca: str | Path | None = None,
        tls: bool = False,
        timeout: float = 120.0,
    ):
        self.target = normalize_target(target)
        self.metadata = credential_metadata(token, user, groups)
        self.timeout = timeout
        if tls_ca is not None or tls:
            root = Path(tls_ca).read_bytes() if tls_ca is not None else None
            self.channel = grpc.secure_channel(self.target, grpc.ssl_channel_credentials(root_certificates=root))
        else:
            self.channel = grpc.insecure_channel(self.target)
        self.stub = pb_grpc.PolicyAdminStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, rpc: str, request: Message) -> Any:
        try:
            return getattr(self.stub, rpc)(request, metadata=self.metadata, timeout=self.timeout)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
            details = e.details() if hasattr(e, "details") else str(e)
            if code == grpc.StatusCode.UNAVAILABLE:
                details = f"cannot reach rowgate at {self.target}: {details}"
            elif code == grpc.StatusCode.UNIMPLEMENTED:
                details = f"{self.target} does not serve the rowgate admin API ({details})"
            raise AdminError(code, details or code.name) from None

    # -- the RPCs ----------------------------------------------------------------------

    def list_policies(self, table: str | None = None) -> list[pb.Policy]:
        request = pb.ListPoliciesRequest()
        if table:
            request.table = table
        return list(self._call("ListPolicies", request).policies)

    def get_policy(self, table: str, name: str) -> pb.Policy:
        return self._call("GetPolicy", pb.GetPolicyRequest(table=table, policy_name=name))

    def create_policy(
        self,
        table: str | TableName,
        name: str,
        grantees: Sequence[str],
        filter_sql: str,
        *,
        replace: bool = False,
        if_not_exists: bool = False,
    ) -> pb.Policy:
        policy = policy_proto(table, name, grantees, filter_sql)
        return self._call("CreatePolicy", pb.CreatePolicyRequest(policy=policy, replace=replace, if_not_exists=if_not_exists))

    def drop_policy(self, table: str | TableName, name: str, *, if_exists: bool = False) -> bool:
        text = table if isinstance(table, str) else table.sql()
        return self._call("DropPolicy", pb.DropPolicyRequest(table=text, policy_name=name, if_exists=if_exists)).dropped

    def explain_access(
        self,
        principal: str,
        sql: str,
        groups: Sequence[str] = (),
        *,
        current_catalog: str | None = None,
        current_schema: str | None = None,
    ) -> pb.ExplainAccessResponse:
        request = pb.ExplainAccessRequest(principal=principal, groups=list(groups), sql=sql)
        if current_catalog:
            request.current_catalog = current_catalog
        if current_schema:
            request.current_schema = current_schema
        return self._call("ExplainAccess", request)

    def list_history(self, table: str | None = None, *, after_version: int = 0) -> pb.ListHistoryResponse:
        request = pb.ListHistoryRequest(after_version=after_version)
        if table:
            request.table = table
        return self._call("ListHistory", request)

    def apply_policies(self, specs: Iterable[PolicySpec], *, prune: bool = False, dry_run: bool = False) -> pb.ChangeResponse:
        return self._call("ApplyPolicies", apply_request(specs, prune=prune, dry_run=dry_run))

    def rollback(self, to_version: int, table: str | None = None, *, dry_run: bool = False) -> pb.ChangeResponse:
        return self._call("Rollback", rollback_request(to_version, table, dry_run=dry_run))

    def preview_impact(
        self,
        principals: Iterable[tuple[str, Sequence[str]]],
        *,
        create: pb.CreatePolicyRequest | None = None,
        drop: pb.DropPolicyRequest | None = None,
        apply: pb.ApplyPoliciesRequest | None = None,
        rollback: pb.RollbackRequest | None = None,
    ) -> pb.PreviewImpactResponse:
        """Rows each principal ((principal, groups) pairs) reads now and after one change:
        give exactly one of `create`, `drop`, `apply` or `rollback` (those RPCs' requests)."""
        request = pb.PreviewImpactRequest(principals=principals_proto(principals))
        given = {k: v for k, v in (("create", create), ("drop", drop), ("apply", apply), ("rollback", rollback)) if v is not None}
        if len(given) != 1:
            raise ValueError("give exactly one change to preview: create, drop, apply or rollback")
        [(field, change)] = given.items()
        getattr(request, field).CopyFrom(change)
        return self._call("PreviewImpact", request)


def apply_request(specs: Iterable[PolicySpec], *, prune: bool = False, dry_run: bool = False) -> pb.ApplyPoliciesRequest:
    policies = [policy_proto(s.table, s.name, s.grantees, s.filter) for s in specs]
    return pb.ApplyPoliciesRequest(policies=policies, prune=prune, dry_run=dry_run)


def rollback_request(to_version: int, table: str | None = None, *, dry_run: bool = False) -> pb.RollbackRequest:
    request = pb.RollbackRequest(to_version=to_version, dry_run=dry_run)
    if table:
        request.table = table
    return request
