"""`rowgate policies ...`: argument handling, and every action end to end against the
in-process admin server (the real servicer and store; Spark replaced by a fake catalog)."""

from __future__ import annotations

import pytest

from rowgate import cli
from rowgate.admin.client import AdminClient, credential_metadata, normalize_target
from rowgate.cli_policies import build_parser

from .conftest import ADMIN


def rowgate(server, *args: str, user: str = ADMIN) -> int:
    return cli.main(["policies", "--target", server.target, "--user", user, *args])


# -- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["list"], {"action": "list", "table": None, "target": "localhost:15002", "token": None, "user": None}),
        (["--target", "h:1", "--token", "T", "list", "--table", "db.t"], {"target": "h:1", "token": "T", "table": "db.t"}),
        (
            [
                "create",
                "--table",
                "t",
                "--name",
                "n",
                "--grant",
                "user:a@example.com",
                "--grant",
                "allUsers",
                "--filter",
                "x > 1",
                "--replace",
            ],
            {"grant": ["user:a@example.com", "allUsers"], "filter": "x > 1", "replace": True, "if_not_exists": False},
        ),
        (["create", "--table", "t", "--name", "n", "--filter", "TRUE"], {"grant": [], "replace": False}),
        (["drop", "--table", "t", "--name", "n", "--if-exists"], {"if_exists": True}),
        (
            [
                "explain",
                "--principal",
                "a@example.com",
                "--group",
                "g@example.com",
                "--group",
                "h@example.com",
                "--sql",
                "SELECT 1",
            ],
            {"explain_groups": ["g@example.com", "h@example.com"], "current_catalog": None},
        ),
        (["export"], {"file": None}),
        (["apply", "--file", "p.yaml", "--prune"], {"file": "p.yaml", "prune": True, "dry_run": False}),
        (
            ["--user", "user:a@example.com", "--groups", "g@example.com", "export", "--file", "o.yaml"],
            {"groups": "g@example.com"},
        ),
    ],
)
def test_arguments(argv, expected, monkeypatch):
    monkeypatch.delenv("ROWGATE_TARGET", raising=False)
    args = build_parser().parse_args(argv)
    for key, value in expected.items():
        assert getattr(args, key) == value, key


def test_target_from_environment(monkeypatch):
    monkeypatch.setenv("ROWGATE_TARGET", "proxy.internal:443")
    assert build_parser().parse_args(["list"]).target == "proxy.internal:443"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--token", "T", "--user", "user:a@example.com", "list"], "not allowed with argument"),
        (["create", "--table", "t", "--name", "n", "--filter", "x", "--replace", "--if-not-exists"], "not allowed with argument"),
        (["create", "--table", "t", "--name", "n"], "the following arguments are required: --filter"),
        (["drop", "--table", "t"], "the following arguments are required: --name"),
        (["explain", "--sql", "SELECT 1"], "--principal"),
        (["apply"], "--file"),
        ([], "ACTION"),
        (["nope"], "invalid choice"),
        (["--tls", "--tls-ca", "ca.pem", "list"], "not allowed with argument"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["policies", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_is_still_there(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert "--upstream" in capsys.readouterr().out


@pytest.mark.parametrize(
    "target, expected",
    [
        ("localhost:15002", "localhost:15002"),
        ("proxy", "proxy:15002"),
        ("sc://proxy:443/;token=abc", "proxy:443"),
        ("[::1]:15002", "[::1]:15002"),
        ("[::1]", "[::1]:15002"),
    ],
)
def test_normalize_target(target, expected):
    assert normalize_target(target) == expected


@pytest.mark.parametrize("target", ["", "host:port", ":15002", "a:b:c"])
def test_bad_targets(target):
    with pytest.raises(ValueError, match="target"):
        normalize_target(target)


def test_credential_metadata():
    assert credential_metadata(token="T") == (("authorization", "Bearer T"),)
    assert credential_metadata(user="user:a@example.com", groups=["g@example.com", "h@example.com"]) == (
        ("x-rowgate-user", "user:a@example.com"),
        ("x-rowgate-groups", "g@example.com,h@example.com"),
    )
    assert credential_metadata() == ()
    with pytest.raises(ValueError):
        credential_metadata(token="T", user="user:a@example.com")


def test_client_side_errors_exit_1(capsys, tmp_path):
    assert cli.main(["policies", "--groups", "g@example.com", "list"]) == 1
    assert "--groups goes with --user" in capsys.readouterr().err
    assert cli.main(["policies", "--target", "a:b:c", "list"]) == 1
    assert "--target wants HOST:PORT" in capsys.readouterr().err
    assert cli.main(["policies", "--tls-ca", str(tmp_path / "missing.pem"), "list"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_unreachable_proxy_exits_1(capsys):
    from rowgate.embedded.spark import free_port

    assert cli.main(["policies", "--target", f"127.0.0.1:{free_port()}", "--timeout", "5", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rowgate policies list: UNAVAILABLE: cannot reach rowgate at 127.0.0.1:")


def test_token_from_environment_is_sent(admin_server, monkeypatch, capsys):
    monkeypatch.setenv("ROWGATE_TOKEN", "secret-token")
    # the header-only test server does not accept tokens: the refusal shows it was sent
    assert cli.main(["policies", "--target", admin_server.target, "list"]) == 1
    err = capsys.readouterr().err
    assert "UNAUTHENTICATED: authorization sent, but no enabled identity source (header) accepts it" in err
    assert "secret-token" not in err


# -- actions against the in-process server -------------------------------------------------


def test_create_list_get_drop(admin_server, capsys):
    assert (
        rowgate(
            admin_server,
            "create",
            "--table",
            "orders",
            "--name",
            "emea",
            "--grant",
            "group:emea@example.com",
            "--filter",
            "region = 'EMEA'",
        )
        == 0
    )
    assert capsys.readouterr().out == "created row access policy emea on spark_catalog.default.orders\n"
    assert rowgate(admin_server, "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TABLE", "POLICY", "GRANTEES", "FILTER", "LAST", "MODIFIED"]
    assert out[1].startswith("spark_catalog.default.orders  emea    group:emea@example.com  region = 'EMEA'  20")
    assert rowgate(admin_server, "get", "--table", "orders", "--name", "EMEA", "--json") == 0
    assert '"policy_name": "emea"' in capsys.readouterr().out
    assert rowgate(admin_server, "create", "--table", "orders", "--name", "emea", "--filter", "TRUE") == 1
    assert "rowgate policies create: ALREADY_EXISTS: row access policy emea already exists" in capsys.readouterr().err
    assert rowgate(admin_server, "create", "--table", "orders", "--name", "emea", "--filter", "TRUE", "--replace") == 0
    assert capsys.readouterr().out.startswith("replaced")
    assert rowgate(admin_server, "drop", "--table", "orders", "--name", "emea") == 0
    assert capsys.readouterr().out == "dropped row access policy emea on orders\n"
    assert rowgate(admin_server, "drop", "--table", "orders", "--name", "emea") == 1
    assert "NOT_FOUND: no row access policy emea on spark_catalog.default.orders" in capsys.readouterr().err
    assert rowgate(admin_server, "drop", "--table", "orders", "--name", "emea", "--if-exists") == 0
    assert "nothing dropped" in capsys.readouterr().out
    assert rowgate(admin_server, "list") == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no row access policies" in captured.err


def test_non_admin_gets_a_clear_message(admin_server, capsys):
    assert rowgate(admin_server, "list", user="user:bob@example.com") == 1
    assert capsys.readouterr().err == (
        "rowgate policies list: PERMISSION_DENIED: rowgate.v1.PolicyAdmin/ListPolicies is reserved for rowgate admins;"
        " user:bob@example.com is not one\n"
    )


def test_explain(admin_server, capsys):
    rowgate(
        admin_server,
        "create",
        "--table",
        "orders",
        "--name",
        "mine",
        "--grant",
        "domain:example.com",
        "--filter",
        "owner = SESSION_USER()",
    )
    capsys.readouterr()
    assert rowgate(admin_server, "explain", "--principal", "ann@example.com", "--sql", "SELECT * FROM orders") == 0
    out = capsys.readouterr().out
    assert "row filter applied: yes" in out
    assert "policies applied: spark_catalog.default.orders:mine" in out
    assert "owner = 'ann@example.com'" in out
    assert rowgate(admin_server, "explain", "--principal", "ann@example.com", "--sql", "DELETE FROM orders") == 0
    assert capsys.readouterr().out.startswith("refused (PERMISSION_DENIED): ")
    assert rowgate(admin_server, "explain", "--principal", "group:x@example.com", "--sql", "SELECT 1") == 1
    assert "INVALID_ARGUMENT: principal:" in capsys.readouterr().err


POLICIES = """\
- table: orders
  name: emea
  grantees: [group:emea@example.com, user:ann@example.com]
  filter: region = 'EMEA'
- table: sales.items
  name: mine
  filter: owner = SESSION_USER()
"""


def test_export_apply_round_trip(admin_server, tmp_path, capsys):
    src = tmp_path / "in.yaml"
    src.write_text(POLICIES)
    assert rowgate(admin_server, "apply", "--file", str(src), "--dry-run") == 0
    out = capsys.readouterr().out
    assert out == (
        "would create spark_catalog.default.orders emea\n"
        "would create spark_catalog.sales.items mine\n"
        "dry run: would make 2 created, 0 replaced, 0 dropped, 0 unchanged (without --prune nothing is dropped)\n"
    )
    assert admin_server.cache.snapshot.all() == ()
    assert rowgate(admin_server, "apply", "--file", str(src)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "created spark_catalog.default.orders emea",
        "created spark_catalog.sales.items mine",
        "2 created, 0 replaced, 0 dropped, 0 unchanged (without --prune nothing is dropped)",
    ]
    first = tmp_path / "first.yaml"
    assert rowgate(admin_server, "export", "--file", str(first)) == 0
    assert capsys.readouterr().err == f"exported 2 row access policies to {first}\n"
    assert rowgate(admin_server, "apply", "--file", str(first), "--prune") == 0
    assert capsys.readouterr().out == "0 created, 0 replaced, 0 dropped, 2 unchanged\n"

    # to stdout, identical to the file
    assert rowgate(admin_server, "export") == 0
    assert capsys.readouterr().out == first.read_text()

    changed = tmp_path / "changed.yaml"
    changed.write_text(
        "- table: spark_catalog.default.orders\n  name: emea\n  grantees: [group:emea@example.com]\n  filter: region = 'EMEA'\n"
    )
    assert rowgate(admin_server, "apply", "--file", str(changed), "--prune") == 0
    assert capsys.readouterr().out.splitlines() == [
        "replaced spark_catalog.default.orders emea",
        "dropped spark_catalog.sales.items mine",
        "0 created, 1 replaced, 1 dropped, 0 unchanged",
    ]
    assert [(p.name, p.grantees) for p in admin_server.cache.snapshot.all()] == [("emea", ("group:emea@example.com",))]


def test_apply_refuses_a_bad_file_before_changing_anything(admin_server, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICIES + "- table: orders\n  name: broken\n  filter: TRUE\n")
    assert rowgate(admin_server, "apply", "--file", str(bad)) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"rowgate policies apply: {bad}:8: policy #3 (spark_catalog.default.orders broken): filter must be a string"
    )
    assert admin_server.cache.snapshot.all() == ()
    assert rowgate(admin_server, "apply", "--file", str(tmp_path / "missing.yaml")) == 1
    assert "no such file" in capsys.readouterr().err


def test_apply_is_all_or_nothing(admin_server, tmp_path, capsys):
    src = tmp_path / "in.yaml"
    src.write_text(POLICIES + "- table: zz_nowhere\n  name: p\n  filter: 'TRUE'\n")  # sorts after orders
    assert rowgate(admin_server, "apply", "--file", str(src)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "rowgate policies apply: NOT_FOUND: cannot create spark_catalog.default.zz_nowhere p:"
        " table spark_catalog.default.zz_nowhere does not exist; nothing was changed",
    ]
    assert admin_server.cache.snapshot.all() == ()  # not even the valid ones before it
    with AdminClient(admin_server.target, user=ADMIN, timeout=20) as c:
        assert c.list_history().entries == []
