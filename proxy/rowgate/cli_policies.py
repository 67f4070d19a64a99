"""`rowgate policies ...`: manage row access policies through a running proxy's admin API.

    rowgate policies [--target HOST:PORT] [--token T | --user MEMBER [--groups G1,G2]]
                     [--tls-ca FILE | --tls] [--timeout S] ACTION ...

    list    [--table T] [--json]
    get     --table T --name N [--json]
    create  --table T --name N [--grant M ...] --filter SQL [--replace | --if-not-exists]
    drop    --table T --name N [--if-exists]
    explain --principal M [--group G ...] --sql SQL [--current-catalog C] [--current-schema S] [--json]
    export  [--file out.yaml]
    apply   --file in.yaml [--prune] [--dry-run]

Tables are `catalog.schema.table`; one- and two-part names mean spark_catalog.default.
The token may also come from ROWGATE_TOKEN and the target from ROWGATE_TARGET, which keeps
the token out of the process list. Exit status: 0 success, 1 failure (the reason on stderr),
2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

PROG = "rowgate policies"
DEFAULT_TARGET = "localhost:15002"


def add_policies_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get("ROWGATE_TARGET", DEFAULT_TARGET),
        help=f"the proxy's HOST:PORT (or sc://HOST:PORT); env ROWGATE_TARGET; default {DEFAULT_TARGET}",
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--token", help="bearer token for the jwt/token identity sources (default: env ROWGATE_TOKEN)")
    who.add_argument("--user", metavar="MEMBER", help="member sent as x-rowgate-user (header identity, trusted hops only)")
    parser.add_argument("--groups", metavar="G1,G2", help="groups sent as x-rowgate-groups with --user")
    tls = parser.add_mutually_exclusive_group()
    tls.add_argument("--tls-ca", metavar="FILE", help="PEM CA certificate to verify the proxy's TLS certificate")
    tls.add_argument("--tls", action="store_true", help="use TLS with the system's trusted CAs")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = actions.add_parser("list", help="list policies, on one table or all")
    p.add_argument("--table", help="only this table")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = actions.add_parser("get", help="show one policy")
    p.add_argument("--table", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--json", action="store_true")

    p = actions.add_parser("create", help="create (or replace) a policy")
    p.add_argument("--table", required=True)
    p.add_argument("--name", required=True)
    p.add_argument(
        "--grant", action="append", default=[], metavar="MEMBER", help="grantee (repeat); default allAuthenticatedUsers"
    )
    p.add_argument("--filter", required=True, metavar="SQL", help="boolean Spark SQL expression over the table's columns")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--replace", action="store_true", help="replace a policy of that name (CREATE OR REPLACE)")
    mode.add_argument("--if-not-exists", action="store_true", help="leave an existing policy of that name alone")

    p = actions.add_parser("drop", help="drop a policy")
    p.add_argument("--table", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--if-exists", action="store_true", help="no error when there is no such policy")

    p = actions.add_parser("explain", help="show what the proxy would do with a statement for a caller")
    p.add_argument("--principal", required=True, metavar="MEMBER", help="user:/serviceAccount: member or bare email")
    p.add_argument(
        "--group", action="append", default=[], dest="explain_groups", metavar="GROUP", help="the caller's group (repeat)"
    )
    p.add_argument("--sql", required=True)
    p.add_argument("--current-catalog", help="the session's current catalog (default spark_catalog)")
    p.add_argument("--current-schema", help="the session's current database (default default)")
    p.add_argument("--json", action="store_true")

    p = actions.add_parser("export", help="write every policy as YAML (sorted, diff-friendly)")
    p.add_argument("--file", help="output file (default: stdout)")

    p = actions.add_parser("apply", help="make the proxy's policies match a YAML file")
    p.add_argument("--file", required=True, help="policy file ('-' for stdin)")
    p.add_argument("--prune", action="store_true", help="also drop policies the file does not name")
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")


def build_parser() -> argparse.ArgumentParser:
    """A standalone parser (the same arguments `rowgate policies` takes), for tests and `-m`."""
    parser = argparse.ArgumentParser(prog=PROG, description="Manage row access policies through rowgate's admin API")
    add_policies_arguments(parser)
    return parser


class CliError(Exception):
    """A failure to report on stderr with exit status 1."""


def run_policies(args: argparse.Namespace, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    from rowgate.admin.client import AdminClient, AdminError
    from rowgate.admin.policy_files import PolicyFileError, TableNameError

    try:
        token = args.token or (None if args.user else os.environ.get("ROWGATE_TOKEN") or None)
        if args.groups and not args.user:
            raise CliError("--groups goes with --user (a token carries its own groups)")
        if args.tls_ca and not Path(args.tls_ca).is_file():
            raise CliError(f"--tls-ca {args.tls_ca}: no such file")
        groups = [g.strip() for g in (args.groups or "").split(",") if g.strip()]
        try:
            client = AdminClient(
                args.target, token=token, user=args.user, groups=groups, tls_ca=args.tls_ca, tls=args.tls, timeout=args.timeout
            )
        except ValueError as e:
            raise CliError(str(e)) from None
        with client:
            return ACTIONS[args.action](client, args, out, err)
    except AdminError as e:
        print(f"{PROG} {args.action}: {e.code.name}: {e.message}", file=err)
    except (CliError, PolicyFileError, TableNameError) as e:
        print(f"{PROG} {args.action}: {e}", file=err)
    except OSError as e:
        print(f"{PROG} {args.action}: {e}", file=err)
    return 1


# -- output helpers ------------------------------------------------------------------------


def _policy_dict(policy) -> dict:
    from rowgate.admin.client import timestamp_text

    return {
        "table_catalog": policy.table_catalog,
        "table_schema": policy.table_schema,
        "table_name": policy.table_name,
        "policy_name": policy.policy_name,
        "grantees": list(policy.grantees),
        "filter_predicate": policy.filter_predicate,
        "creation_time": timestamp_text(policy.creation_time),
        "last_modified_time": timestamp_text(policy.last_modified_time),
    }


def _table_text(policy) -> str:
    from rowgate.admin.client import table_fields
    from rowgate.admin.policy_files import format_table

    return format_table(table_fields(policy))


def _print_policies(policies, out) -> None:
    from rowgate.admin.client import timestamp_text

    header = ("TABLE", "POLICY", "GRANTEES", "FILTER", "LAST MODIFIED")
    rows = [
        (
            _table_text(p),
            p.policy_name,
            ", ".join(p.grantees),
            " ".join(p.filter_predicate.split()),
            timestamp_text(p.last_modified_time),
        )
        for p in policies
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)


# -- actions ---------------------------------------------------------------------------------


def _list(client, args, out, err) -> int:
    policies = client.list_policies(args.table)
    if args.json:
        print(json.dumps([_policy_dict(p) for p in policies], indent=2), file=out)
    elif policies:
        _print_policies(policies, out)
    else:
        print("no row access policies" + (f" on {args.table}" if args.table else ""), file=err)
    return 0


def _get(client, args, out, err) -> int:
    policy = client.get_policy(args.table, args.name)
    if args.json:
        print(json.dumps(_policy_dict(policy), indent=2), file=out)
    else:
        _print_policies([policy], out)
    return 0


def _create(client, args, out, err) -> int:
    policy = client.create_policy(
        args.table, args.name, args.grant, args.filter, replace=args.replace, if_not_exists=args.if_not_exists
    )
    verb = "replaced" if args.replace else "created"
    if args.if_not_exists:
        verb = "created (or kept the existing)"
    print(f"{verb} row access policy {policy.policy_name} on {_table_text(policy)}", file=out)
    return 0


def _drop(client, args, out, err) -> int:
    if client.drop_policy(args.table, args.name, if_exists=args.if_exists):
        print(f"dropped row access policy {args.name} on {args.table}", file=out)
    else:
        print(f"no row access policy {args.name} on {args.table}; nothing dropped", file=out)
    return 0


def _explain(client, args, out, err) -> int:
    reply = client.explain_access(
        args.principal,
        args.sql,
        args.explain_groups,
        current_catalog=args.current_catalog,
        current_schema=args.current_schema,
    )
    if args.json:
        data = {
            "rewritten_sql": reply.rewritten_sql,
            "row_filter_applied": reply.row_filter_applied,
            "policies_applied": list(reply.policies_applied),
            "tables_read": list(reply.tables_read),
            "statement_kind": reply.statement_kind,
            "refusal": reply.refusal,
            "refusal_code": reply.refusal_code,
        }
        print(json.dumps(data, indent=2), file=out)
        return 0
    if reply.refusal:
        print(f"refused ({reply.refusal_code}): {reply.refusal}", file=out)
        return 0
    print(f"row filter applied: {'yes' if reply.row_filter_applied else 'no'}", file=out)
    print(f"tables read: {', '.join(reply.tables_read) or '-'}", file=out)
    print(f"policies applied: {', '.join(reply.policies_applied) or '-'}", file=out)
    print("sql sent to Spark:", file=out)
    print(f"  {reply.rewritten_sql}", file=out)
    return 0


def _current_specs(client):
    from rowgate.admin.client import spec_from_proto

    return [spec_from_proto(p) for p in client.list_policies()]


def _export(client, args, out, err) -> int:
    from rowgate.admin.policy_files import dump_policies

    specs = _current_specs(client)
    text = dump_policies(specs)
    if not args.file or args.file == "-":
        out.write(text)
        return 0
    target = Path(args.file)
    # Written next to the target and renamed over it: a failed export never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"exported {len(specs)} row access polic{'y' if len(specs) == 1 else 'ies'} to {target}", file=err)
    return 0


def _apply(client, args, out, err) -> int:
    from rowgate.admin.client import AdminError
    from rowgate.admin.policy_files import load_policies, plan_apply

    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        path = Path(args.file)
        if not path.is_file():
            raise CliError(f"--file {args.file}: no such file")
        text, source = path.read_text(encoding="utf-8"), args.file
    desired = load_policies(text, source)
    changes = plan_apply(desired, _current_specs(client), prune=args.prune)
    counts = {"create": 0, "replace": 0, "drop": 0, "unchanged": 0}
    past = {"create": "created", "replace": "replaced", "drop": "dropped"}
    for change in changes:
        spec = change.spec
        if change.action == "unchanged":
            counts["unchanged"] += 1
            continue
        if args.dry_run:
            print(f"would {change.action} {spec.label}", file=out)
            counts[change.action] += 1
            continue
        try:
            if change.action == "create":
                client.create_policy(spec.table, spec.name, spec.grantees, spec.filter)
            elif change.action == "replace":
                client.create_policy(spec.table, spec.name, spec.grantees, spec.filter, replace=True)
            else:
                client.drop_policy(spec.table, spec.name, if_exists=True)
        except AdminError as e:
            done = counts["create"] + counts["replace"] + counts["drop"]
            print(f"{PROG} apply: could not {change.action} {spec.label}: {e.code.name}: {e.message}", file=err)
            print(f"{PROG} apply: stopped after {done} change(s); fix the cause and run apply again", file=err)
            return 1
        counts[change.action] += 1
        print(f"{past[change.action]} {spec.label}", file=out)
    prefix = "dry run: would make " if args.dry_run else ""
    print(
        f"{prefix}{counts['create']} created, {counts['replace']} replaced, {counts['drop']} dropped,"
        f" {counts['unchanged']} unchanged" + ("" if args.prune else " (without --prune nothing is dropped)"),
        file=out,
    )
    return 0


ACTIONS = {
    "list": _list,
    "get": _get,
    "create": _create,
    "drop": _drop,
    "explain": _explain,
    "export": _export,
    "apply": _apply,
}


def main(argv: list[str] | None = None) -> int:
    return run_policies(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
