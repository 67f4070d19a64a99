"""The PolicyAdmin servicer through a real gRPC channel (Spark replaced by a fake catalog)."""

from __future__ import annotations

import grpc
import pytest

from rowgate.admin.client import AdminClient, AdminError, spec_from_proto, timestamp_text
from rowgate.admin.policy_files import PolicySpec
from rowgate.admin.v1 import policy_admin_pb2 as pb
from rowgate.admin.v1 import policy_admin_pb2_grpc as pb_grpc
from rowgate.policy.model import TableName

from .conftest import ADMIN


def client(server, **kw) -> AdminClient:
    kw.setdefault("user", ADMIN)
    return AdminClient(server.target, timeout=20, **kw)


def code_of(fn) -> AdminError:
    with pytest.raises(AdminError) as info:
        fn()
    return info.value


def test_create_get_list_drop_round_trip(admin_server):
    with client(admin_server) as c:
        created = c.create_policy("orders", "emea", ["group:emea@EXAMPLE.com", "user:Ann@Example.COM"], "  region = 'EMEA' ")
        assert (created.table_catalog, created.table_schema, created.table_name) == ("spark_catalog", "default", "orders")
        assert list(created.grantees) == ["group:emea@example.com", "user:Ann@example.com"]  # canonical, order kept
        assert created.filter_predicate == "region = 'EMEA'"
        assert timestamp_text(created.creation_time).endswith("Z")
        assert created.creation_time == created.last_modified_time

        got = c.get_policy("spark_catalog.default.ORDERS", "EMEA")
        assert got == created
        c.create_policy("sales.items", "all", [], "TRUE")
        listed = c.list_policies()
        assert [(p.table_name, p.policy_name) for p in listed] == [("orders", "emea"), ("items", "all")]
        assert [p.policy_name for p in c.list_policies("`sales`.items")] == ["all"]
        assert list(c.list_policies("sales.items")[0].grantees) == ["allAuthenticatedUsers"]

        assert c.drop_policy("orders", "emea") is True
        assert c.drop_policy("orders", "emea", if_exists=True) is False
        assert [p.policy_name for p in c.list_policies()] == ["all"]
    # the cache the proxy enforces from was refreshed by every write
    assert [p.name for p in admin_server.cache.snapshot.all()] == ["all"]


def test_replace_and_if_not_exists(admin_server):
    with client(admin_server) as c:
        first = c.create_policy("orders", "p", ["allUsers"], "id > 1")
        e = code_of(lambda: c.create_policy("orders", "P", ["allUsers"], "id > 2"))
        assert e.code == grpc.StatusCode.ALREADY_EXISTS and "already exists" in e.message
        kept = c.create_policy("orders", "P", ["allUsers"], "id > 2", if_not_exists=True)
        assert kept.filter_predicate == "id > 1"
        replaced = c.create_policy("orders", "P", ["allUsers"], "id > 3", replace=True)
        assert replaced.filter_predicate == "id > 3"
        assert replaced.creation_time == first.creation_time
        e = code_of(lambda: c.create_policy("orders", "q", [], "TRUE", replace=True, if_not_exists=True))
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "table, name, grantees, filter_sql, code, message",
    [
        ("missing", "p", [], "TRUE", grpc.StatusCode.NOT_FOUND, "table spark_catalog.default.missing does not exist"),
        ("orders_view", "p", [], "TRUE", grpc.StatusCode.INVALID_ARGUMENT, "is a view"),
        (
            "orders",
            "p",
            ["alice@example.com"],
            "TRUE",
            grpc.StatusCode.INVALID_ARGUMENT,
            "grantee 'alice@example.com' is not a member",
        ),
        (
            "orders",
            "p",
            [],
            "no_such_column = 1",
            grpc.StatusCode.INVALID_ARGUMENT,
            "the filter does not run on spark_catalog.default.orders",
        ),
        ("orders", "p", [], "id IN (SELECT 1); DROP TABLE x", grpc.StatusCode.INVALID_ARGUMENT, "without DML"),
        ("orders", "p", [], "   ", grpc.StatusCode.INVALID_ARGUMENT, "filter_predicate is required"),
        ("orders", "", [], "TRUE", grpc.StatusCode.INVALID_ARGUMENT, "policy_name: name is empty"),
    ],
)
def test_create_refusals_keep_their_status(admin_server, table, name, grantees, filter_sql, code, message):
    with client(admin_server) as c:
        e = code_of(lambda: c.create_policy(table, name, grantees, filter_sql))
    assert e.code == code, e
    assert message in e.message
    assert admin_server.cache.snapshot.all() == ()


def test_get_and_drop_missing_are_not_found(admin_server):
    with client(admin_server) as c:
        e = code_of(lambda: c.get_policy("orders", "nope"))
        assert e.code == grpc.StatusCode.NOT_FOUND and e.message == "no row access policy nope on spark_catalog.default.orders"
        e = code_of(lambda: c.drop_policy("orders", "nope"))
        assert e.code == grpc.StatusCode.NOT_FOUND
        e = code_of(lambda: c.list_policies("a.b.c.d"))
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "at most 3" in e.message


ALL_RPCS = [
    ("ListPolicies", pb.ListPoliciesRequest()),
    ("GetPolicy", pb.GetPolicyRequest(table="orders", policy_name="p")),
    ("CreatePolicy", pb.CreatePolicyRequest(policy=pb.Policy(table_name="orders", policy_name="p", filter_predicate="TRUE"))),
    ("DropPolicy", pb.DropPolicyRequest(table="orders", policy_name="p")),
    ("ExplainAccess", pb.ExplainAccessRequest(principal="user:a@example.com", sql="SELECT 1")),
    ("ListHistory", pb.ListHistoryRequest()),
    (
        "ApplyPolicies",
        pb.ApplyPoliciesRequest(policies=[pb.Policy(table_name="orders", policy_name="p", filter_predicate="TRUE")]),
    ),
    ("Rollback", pb.RollbackRequest(to_version=0)),
    (
        "PreviewImpact",
        pb.PreviewImpactRequest(
            drop=pb.DropPolicyRequest(table="orders", policy_name="p", if_exists=True),
            principals=[pb.Principal(principal="user:a@example.com")],
        ),
    ),
]


@pytest.mark.parametrize("rpc, request_", ALL_RPCS, ids=[r for r, _ in ALL_RPCS])
@pytest.mark.parametrize(
    "metadata, code, message",
    [
        (
            (("x-rowgate-user", "user:bob@example.com"),),
            grpc.StatusCode.PERMISSION_DENIED,
            "is reserved for rowgate admins; user:bob@example.com is not one",
        ),
        ((), grpc.StatusCode.PERMISSION_DENIED, "user:anonymous is not one (no credential was sent)"),
        ((("x-rowgate-user", "bob@example.com"),), grpc.StatusCode.UNAUTHENTICATED, "bad x-rowgate-user header"),
        (
            (("authorization", "Bearer abc"),),
            grpc.StatusCode.UNAUTHENTICATED,
            "authorization sent, but no enabled identity source",
        ),
        ((("x-rowgate-user", "user:admin@example.com"), ("authorization", "Bearer abc")), None, None),
    ],
    ids=["non-admin", "anonymous", "bad-header", "unclaimed-token", "admin-wins-first"],
)
def test_every_rpc_requires_an_admin(admin_server, rpc, request_, metadata, code, message):
    with admin_server.channel() as channel:
        method = getattr(pb_grpc.PolicyAdminStub(channel), rpc)
        if code is None:
            # the header source resolves the admin first; an authorization header no source
            # claimed is only refused when nothing resolved the caller
            try:
                method(request_, metadata=metadata, timeout=20)
            except grpc.RpcError as e:
                assert e.code() not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), e
            return
        with pytest.raises(grpc.RpcError) as info:
            method(request_, metadata=metadata, timeout=20)
    assert info.value.code() == code
    assert message in info.value.details()
    if code == grpc.StatusCode.PERMISSION_DENIED:
        assert f"rowgate.v1.PolicyAdmin/{rpc}" in info.value.details()
    assert admin_server.cache.snapshot.all() == ()


def test_a_group_admin_is_an_admin(admin_server):
    with client(admin_server, user="user:carol@example.com", groups=["admins@example.com"]) as c:
        assert c.list_policies() == []


def test_explain_access_filters_per_caller(admin_server):
    with client(admin_server) as c:
        c.create_policy("orders", "emea", ["group:emea@example.com"], "region = 'EMEA'")
        c.create_policy("orders", "mine", ["domain:example.com"], "owner = SESSION_USER()")

        ann = c.explain_access("ann@example.com", "SELECT id FROM orders o WHERE id > 1", ["emea@example.com"])
        assert ann.refusal == ""
        assert ann.row_filter_applied
        assert list(ann.policies_applied) == ["spark_catalog.default.orders:emea", "spark_catalog.default.orders:mine"]
        assert list(ann.tables_read) == ["spark_catalog.default.orders"]
        assert "region = 'EMEA'" in ann.rewritten_sql and "owner = 'ann@example.com'" in ann.rewritten_sql
        assert ann.statement_kind == "query"

        outsider = c.explain_access("user:eve@other.org", "SELECT id FROM orders")
        assert outsider.row_filter_applied and list(outsider.policies_applied) == []

        in_sales = c.explain_access("user:ann@example.com", "SELECT * FROM items", current_schema="sales")
        assert not in_sales.row_filter_applied
        assert list(in_sales.tables_read) == ["spark_catalog.sales.items"]
        assert in_sales.rewritten_sql == "SELECT * FROM `spark_catalog`.`sales`.`items`"  # names pinned

        write = c.explain_access("user:ann@example.com", "INSERT INTO orders VALUES (1, 'EMEA', 'x')")
        assert write.refusal_code == "PERMISSION_DENIED" and "orders" in write.refusal
        assert write.rewritten_sql == ""


@pytest.mark.parametrize(
    "principal, groups, sql, message",
    [
        (
            "group:eng@example.com",
            [],
            "SELECT 1",
            "principal: principal 'group:eng@example.com' must be a user: or serviceAccount: member",
        ),
        ("", [], "SELECT 1", "principal"),
        ("user:a@example.com", ["user:x@example.com"], "SELECT 1", "groups:"),
        ("user:a@example.com", [], "  ", "sql is required"),
    ],
)
def test_explain_access_bad_requests(admin_server, principal, groups, sql, message):
    with client(admin_server) as c:
        e = code_of(lambda: c.explain_access(principal, sql, groups))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in e.message


def test_spec_from_proto(admin_server):
    with client(admin_server) as c:
        c.create_policy("sales.items", "p", ["user:b@example.com", "user:a@example.com"], "owner = SESSION_USER()")
        [policy] = c.list_policies()
    spec = spec_from_proto(policy)
    assert spec.table == TableName("spark_catalog", "sales", "items")
    assert spec.normalized().grantees == ("user:a@example.com", "user:b@example.com")


# -- history, apply, rollback, preview --------------------------------------------------------


def test_history_records_the_admin_api_author(admin_server):
    with client(admin_server, user="user:carol@example.com", groups=["admins@example.com"]) as c:
        c.create_policy("orders", "p", ["allUsers"], "id > 1")
    with client(admin_server) as c:
        c.create_policy("orders", "p", ["allUsers"], "id > 2", replace=True)
        c.drop_policy("orders", "p")
        reply = c.list_history()
        assert reply.version == 3 and reply.history_since == 0
        entries = [(e.version, e.author, e.via, e.action, e.detail) for e in reply.entries]
        assert entries == [
            (3, ADMIN, "admin_api", "drop", "DropPolicy"),
            (2, ADMIN, "admin_api", "replace", "CreatePolicy (replace)"),
            (1, "user:carol@example.com", "admin_api", "create", "CreatePolicy"),
        ]
        drop, replace, _ = reply.entries
        assert drop.before.filter_predicate == "id > 2" and not drop.HasField("after")
        assert (replace.before.filter_predicate, replace.after.filter_predicate) == ("id > 1", "id > 2")
        assert replace.table == "spark_catalog.default.orders" and timestamp_text(replace.change_time).endswith("Z")
        assert [e.version for e in c.list_history("sales.items").entries] == []
        assert [e.version for e in c.list_history(after_version=2).entries] == [3]


def test_apply_policies_plans_validates_and_commits_as_one_version(admin_server):
    with client(admin_server) as c:
        c.create_policy("orders", "old", [], "id > 0")
        c.create_policy("orders", "same", ["user:a@example.com"], "TRUE")
        specs = [
            PolicySpec(TableName("spark_catalog", "default", "orders"), "same", ("user:a@example.com",), "TRUE"),
            PolicySpec(TableName("spark_catalog", "sales", "items"), "new", (), "owner = SESSION_USER()"),
        ]
        dry = c.apply_policies(specs, prune=True, dry_run=True)
        assert dry.dry_run and dry.version == 2 and dry.unchanged == 1
        assert [(x.action, (x.after if x.HasField("after") else x.before).policy_name) for x in dry.changes] == [
            ("create", "new"),
            ("drop", "old"),
        ]
        assert c.list_history().version == 2  # a dry run writes nothing
        done = c.apply_policies(specs, prune=True)
        assert done.version == 3 and not done.dry_run
        assert {(e.version, e.via, e.author) for e in c.list_history(after_version=2).entries} == {(3, "apply", ADMIN)}
        assert sorted(p.policy_name for p in c.list_policies()) == ["new", "same"]
        # all or nothing: one bad policy and none is made
        bad = [*specs, PolicySpec(TableName("spark_catalog", "default", "missing"), "x", (), "TRUE")]
        e = code_of(lambda: c.apply_policies([*bad, PolicySpec(specs[1].table, "other", (), "TRUE")]))
        assert e.code == grpc.StatusCode.NOT_FOUND and "cannot create spark_catalog.default.missing x" in e.message
        assert c.list_history().version == 3
        e = code_of(lambda: c.apply_policies([specs[0], specs[0]]))
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "repeats policies[0]" in e.message
        bad_member = PolicySpec(specs[0].table, "m", ("alice@example.com",), "TRUE")
        e = code_of(lambda: c.apply_policies([bad_member]))
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "is not a member" in e.message


def test_rollback(admin_server):
    with client(admin_server) as c:
        c.create_policy("orders", "a", [], "id > 0")
        c.create_policy("sales.items", "b", [], "TRUE")
        state = [(p.table_name, p.policy_name, p.filter_predicate, p.creation_time) for p in c.list_policies()]
        c.create_policy("orders", "a", [], "id > 5", replace=True)
        c.drop_policy("sales.items", "b")
        c.create_policy("orders", "c", [], "TRUE")
        dry = c.rollback(2, dry_run=True)
        assert sorted(x.action for x in dry.changes) == ["create", "drop", "replace"] and dry.version == 5
        assert c.list_history().version == 5
        done = c.rollback(2)
        assert done.version == 6
        assert [(p.table_name, p.policy_name, p.filter_predicate, p.creation_time) for p in c.list_policies()] == state
        entries = c.list_history(after_version=5).entries
        assert {(e.via, e.author, e.detail) for e in entries} == {("rollback", ADMIN, "to version 2")}
        assert c.rollback(2).changes == []  # already there
        # one table
        c.drop_policy("orders", "a")
        c.drop_policy("sales.items", "b")
        c.rollback(6, table="sales.items")
        assert [p.policy_name for p in c.list_policies()] == ["b"]
        for version, code in ((99, grpc.StatusCode.FAILED_PRECONDITION), (-1, grpc.StatusCode.INVALID_ARGUMENT)):
            e = code_of(lambda v=version: c.rollback(v))
            assert e.code == code
    # the cache the proxy enforces from was refreshed
    assert [p.name for p in admin_server.cache.snapshot.all()] == ["b"]


def test_rollback_refuses_to_restore_on_a_table_that_is_gone(admin_server):
    with client(admin_server) as c:
        c.create_policy("orders", "a", [], "TRUE")
        del admin_server.catalog.tables[TableName("spark_catalog", "default", "orders")]
        c.drop_policy("orders", "a")
        e = code_of(lambda: c.rollback(1))
        assert e.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "on spark_catalog.default.orders: no such table now" in e.message
        assert c.list_history().version == 2


class RecordingImpact:
    """Stands in for Spark's counts: records what it is asked, answers from a table."""

    def __init__(self):
        self.asked = []

    async def rows(self, tables, now, after, callers):
        from rowgate.admin.impact import ImpactRow

        self.asked.append((list(tables), list(now), list(after), list(callers)))
        return [
            ImpactRow(t, caller, len([p for p in now if p.table == t]), len([p for p in after if p.table == t]))
            for t in tables
            for caller in callers
        ]


def test_preview_impact_plans_like_the_change_and_writes_nothing(admin_server):
    impact = RecordingImpact()
    admin_server.servicer.impact = impact
    principals = [("ann@example.com", ["eu@example.com", "group:apac@example.com"]), ("user:bob@example.com", [])]
    with client(admin_server) as c:
        c.create_policy("orders", "a", [], "id > 0")
        create = pb.CreatePolicyRequest(policy=pb.Policy(table_name="orders", policy_name="b", filter_predicate="TRUE"))
        reply = c.preview_impact(principals, create=create)
        [(tables, now, after, callers)] = impact.asked
        assert tables == [TableName("spark_catalog", "default", "orders")]
        assert [p.name for p in now] == ["a"] and [p.name for p in after] == ["a", "b"]
        assert [(x.principal, sorted(x.groups)) for x in callers] == [
            ("user:ann@example.com", ["apac@example.com", "eu@example.com"]),
            ("user:bob@example.com", []),
        ]
        assert [(r.principal, r.rows_now, r.rows_after) for r in reply.rows] == [
            ("user:ann@example.com", 1, 2),
            ("user:bob@example.com", 1, 2),
        ]
        assert [x.action for x in reply.changes] == ["create"] and reply.version == 1

        reply = c.preview_impact(principals, rollback=pb.RollbackRequest(to_version=0))
        assert [x.action for x in reply.changes] == ["drop"] and [p.name for p in impact.asked[-1][2]] == []
        reply = c.preview_impact(principals, drop=pb.DropPolicyRequest(table="orders", policy_name="missing", if_exists=True))
        assert list(reply.changes) == [] and impact.asked[-1][0] == []
        assert c.list_history().version == 1  # nothing was written by any preview

        for bad, message in [
            ([("user:a@example.com", []), ("a@example.com", [])], "given twice"),
            ([("group:x@example.com", [])], "principals[0]"),
            ([("user:a@example.com", ["user:b@example.com"])], "principals[0].groups"),
        ]:
            e = code_of(lambda b=bad: c.preview_impact(b, create=create))
            assert e.code == grpc.StatusCode.INVALID_ARGUMENT and message in e.message
        e = code_of(lambda: c.preview_impact(principals, drop=pb.DropPolicyRequest(table="orders", policy_name="missing")))
        assert e.code == grpc.StatusCode.NOT_FOUND
        with admin_server.channel() as channel:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.PolicyAdminStub(channel).PreviewImpact(
                    pb.PreviewImpactRequest(principals=[pb.Principal(principal="user:a@example.com")]),
                    metadata=(("x-rowgate-user", ADMIN),),
                    timeout=20,
                )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "change is required" in info.value.details()
