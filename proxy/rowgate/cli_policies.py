"""`rowgate policies ...`: manage row access policies through a running proxy's admin API.

    rowgate policies [--target HOST:PORT] [--token T | --user MEMBER [--groups G1,G2]]
                     [--tls-ca FILE | --tls] [--timeout S] ACTION ...

    list     [--table T] [--json]
    get      --table T --name N [--json]
    create   --table T --name N [--grant M ...] --filter SQL [--replace | --if-not-exists] [PREVIEW]
    drop     --table T --name N [--if-exists] [PREVIEW]
    explain  --principal M [--group G ...] --sql SQL [--current-catalog C] [--current-schema S] [--json]
    export   [--file out.yaml]
    apply    --file in.yaml [--prune] [--dry-run] [PREVIEW]
    history  [--table T] [--after-version N] [--json]
    rollback --to VERSION [--table T] [--dry-run] [PREVIEW]

    PREVIEW: --dry-run --impact (--principal 'MEMBER[;groups=G1,G2]' ... | --principals-file F) [--json]
      counts, through Spark, the rows each principal reads of every table the change touches,
      now and after it, and prints them largest change first; nothing is changed.

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
from collections.abc import Container, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    from rowgate.admin.client import AdminClient
    from rowgate.admin.policy_files import PolicySpec
    from rowgate.admin.v1 import policy_admin_pb2 as pb

    class _Change(TypedDict, total=False):
        """The one change a preview counts rows for: `AdminClient.preview_impact`'s keywords."""

        create: pb.CreatePolicyRequest
        drop: pb.DropPolicyRequest
        apply: pb.ApplyPoliciesRequest
        rollback: pb.RollbackRequest


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

    def add_preview(p: argparse.ArgumentParser, json_help: str = "print the impact as JSON") -> None:
        g = p.add_argument_group("impact preview (with --dry-run)")
        g.add_argument(
            "--impact", action="store_true", help="count the rows each --principal reads of each touched table, now and after"
        )
        g.add_argument(
            "--principal",
            action="append",
            default=[],
            dest="principals",
            metavar="MEMBER[;groups=G1,G2]",
            help="a principal whose rows to count, with its groups (repeat)",
        )
        g.add_argument("--principals-file", metavar="FILE", help="YAML or JSON list of {principal: MEMBER, groups: [G, ...]}")
        g.add_argument("--json", action="store_true", help=json_help)

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
    p.add_argument("--dry-run", action="store_true", help="validate and show the change, make nothing (with --impact)")
    add_preview(p)

    p = actions.add_parser("drop", help="drop a policy")
    p.add_argument("--table", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--if-exists", action="store_true", help="no error when there is no such policy")
    p.add_argument("--dry-run", action="store_true", help="show the change, make nothing (with --impact)")
    add_preview(p)

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

    p = actions.add_parser("apply", help="make the proxy's policies match a YAML file (one change, all or nothing)")
    p.add_argument("--file", required=True, help="policy file ('-' for stdin)")
    p.add_argument("--prune", action="store_true", help="also drop policies the file does not name")
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    add_preview(p)

    p = actions.add_parser("history", help="every recorded policy change, newest first")
    p.add_argument("--table", help="only changes of this table's policies")
    p.add_argument("--after-version", type=int, default=0, metavar="N", help="only changes with a version above N")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = actions.add_parser("rollback", help="restore the policies as they were at a version of the history")
    p.add_argument("--to", required=True, type=int, dest="to_version", metavar="VERSION", help="a version from `history`")
    p.add_argument("--table", help="only this table's policies (default: every table's)")
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    add_preview(p)


def build_parser() -> argparse.ArgumentParser:
    """A standalone parser (the same arguments `rowgate policies` takes), for tests and `-m`."""
    parser = argparse.ArgumentParser(prog=PROG, description="Manage row access policies through rowgate's admin API")
    add_policies_arguments(parser)
    return parser


class CliError(Exception):
    """A failure to report on stderr with exit status 1."""


def run_policies(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
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


def _policy_dict(policy: pb.Policy) -> dict[str, Any]:
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


def _table_text(policy: pb.Policy) -> str:
    from rowgate.admin.client import table_fields
    from rowgate.admin.policy_files import format_table

    return format_table(table_fields(policy))


def _print_policies(policies: Iterable[pb.Policy], out: TextIO) -> None:
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


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    policies = client.list_policies(args.table)
    if args.json:
        print(json.dumps([_policy_dict(p) for p in policies], indent=2), file=out)
    elif policies:
        _print_policies(policies, out)
    else:
        print("no row access policies" + (f" on {args.table}" if args.table else ""), file=err)
    return 0


def _get(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    policy = client.get_policy(args.table, args.name)
    if args.json:
        print(json.dumps(_policy_dict(policy), indent=2), file=out)
    else:
        _print_policies([policy], out)
    return 0


def _create(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _previewing(args):
        from rowgate.admin.client import policy_proto
        from rowgate.admin.v1 import policy_admin_pb2 as pb

        policy = policy_proto(args.table, args.name, args.grant, args.filter)
        request = pb.CreatePolicyRequest(policy=policy, replace=args.replace, if_not_exists=args.if_not_exists)
        return _preview(client, args, out, create=request)
    policy = client.create_policy(
        args.table, args.name, args.grant, args.filter, replace=args.replace, if_not_exists=args.if_not_exists
    )
    verb = "replaced" if args.replace else "created"
    if args.if_not_exists:
        verb = "created (or kept the existing)"
    print(f"{verb} row access policy {policy.policy_name} on {_table_text(policy)}", file=out)
    return 0


def _drop(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _previewing(args):
        from rowgate.admin.v1 import policy_admin_pb2 as pb

        return _preview(
            client, args, out, drop=pb.DropPolicyRequest(table=args.table, policy_name=args.name, if_exists=args.if_exists)
        )
    if client.drop_policy(args.table, args.name, if_exists=args.if_exists):
        print(f"dropped row access policy {args.name} on {args.table}", file=out)
    else:
        print(f"no row access policy {args.name} on {args.table}; nothing dropped", file=out)
    return 0


def _explain(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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


def _current_specs(client: AdminClient) -> list[PolicySpec]:
    from rowgate.admin.client import spec_from_proto

    return [spec_from_proto(p) for p in client.list_policies()]


def _export(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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


def _apply(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from rowgate.admin.client import AdminError, apply_request
    from rowgate.admin.policy_files import load_policies

    _check_preview_args(args)
    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        path = Path(args.file)
        if not path.is_file():
            raise CliError(f"--file {args.file}: no such file")
        text, source = path.read_text(encoding="utf-8"), args.file
    desired = load_policies(text, source)
    if args.impact:
        return _preview(client, args, out, apply=apply_request(desired, prune=args.prune))
    try:
        reply = client.apply_policies(desired, prune=args.prune, dry_run=args.dry_run)
    except AdminError as e:
        # One change, all or nothing: say so, since the old apply stopped half-way.
        raise CliError(f"{e.code.name}: {e.message}" + ("" if args.dry_run else "; nothing was changed")) from None
    _print_changes(reply.changes, out, dry_run=args.dry_run)
    counts = _counts(reply.changes)
    prefix = "dry run: would make " if args.dry_run else ""
    print(
        f"{prefix}{counts['create']} created, {counts['replace']} replaced, {counts['drop']} dropped,"
        f" {reply.unchanged} unchanged" + ("" if args.prune else " (without --prune nothing is dropped)"),
        file=out,
    )
    return 0


def _history(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from rowgate.admin.client import timestamp_text

    reply = client.list_history(args.table, after_version=args.after_version)
    if args.json:
        print(json.dumps([_history_dict(e) for e in reply.entries], indent=2), file=out)
        return 0
    if not reply.entries:
        print("no policy changes recorded" + (f" on {args.table}" if args.table else ""), file=err)
    else:
        header = ("VERSION", "TIME", "AUTHOR", "VIA", "ACTION", "TABLE", "POLICY", "GRANTEES", "FILTER")
        rows = []
        for e in reply.entries:
            shown = e.after if e.HasField("after") else e.before
            rows.append(
                (
                    str(e.version),
                    timestamp_text(e.change_time),
                    e.author,
                    e.via,
                    e.action,
                    _table_text(shown),
                    e.policy_name,
                    ", ".join(shown.grantees) if e.action != "drop" else "-",
                    " ".join(shown.filter_predicate.split()) if e.action != "drop" else "-",
                )
            )
        _print_rows(header, rows, out)
    if reply.history_since:
        print(f"(the history starts at version {reply.history_since}; the policies are at version {reply.version})", file=err)
    return 0


def _rollback(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from rowgate.admin.client import rollback_request

    _check_preview_args(args)
    if args.impact:
        return _preview(client, args, out, rollback=rollback_request(args.to_version, args.table))
    reply = client.rollback(args.to_version, args.table, dry_run=args.dry_run)
    _print_changes(reply.changes, out, dry_run=args.dry_run)
    counts = _counts(reply.changes)
    what = f"{args.table}'s policies" if args.table else "the policies"
    made = f"{counts['create']} created, {counts['replace']} replaced, {counts['drop']} dropped"
    if args.dry_run:
        print(f"dry run: restoring {what} of version {args.to_version} would make {made}", file=out)
    elif reply.changes:
        print(f"restored {what} of version {args.to_version}: {made} (now version {reply.version})", file=out)
    else:
        print(f"{what} are already as at version {args.to_version}; nothing changed", file=out)
    return 0


# -- impact preview ---------------------------------------------------------------------------


def _previewing(args: argparse.Namespace) -> bool:
    """create and drop change at once unless previewed; their --dry-run is the preview's."""
    _check_preview_args(args)
    if args.dry_run and not args.impact:
        raise CliError(f"{args.action} --dry-run previews the change's impact: add --impact and --principal")
    return bool(args.impact)


def _check_preview_args(args: argparse.Namespace) -> None:
    if args.impact and not args.dry_run:
        raise CliError("--impact previews a change without making it: add --dry-run")
    if (args.principals or args.principals_file) and not args.impact:
        raise CliError("--principal and --principals-file go with --dry-run --impact")
    if args.impact and not (args.principals or args.principals_file):
        raise CliError("--impact needs the principals whose rows to count: --principal MEMBER or --principals-file FILE")


def parse_principal_arg(text: str) -> tuple[str, list[str]]:
    """`MEMBER[;groups=G1,G2]` -> (member, groups).

    >>> parse_principal_arg("user:a@x.com;groups=group:eu@x.com, group:b@x.com")
    ('user:a@x.com', ['group:eu@x.com', 'group:b@x.com'])
    >>> parse_principal_arg("a@x.com")
    ('a@x.com', [])
    """
    member, *options = [part.strip() for part in text.split(";")]
    if not member:
        raise CliError(f"--principal {text!r}: name a member, e.g. user:ann@example.com")
    groups: list[str] = []
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key.strip().lower() != "groups":
            raise CliError(f"--principal {text!r}: expected MEMBER;groups=G1,G2, found {option!r}")
        groups += [g.strip() for g in value.split(",") if g.strip()]
    return member, groups


def load_principals(text: str, source: str) -> list[tuple[str, list[str]]]:
    """A principals file: a YAML (or JSON) list of `{principal: MEMBER, groups: [G, ...]}`.

    >>> load_principals('[{"principal": "user:a@x.com", "groups": ["group:g@x.com"]}, {"principal": "b@x.com"}]', "f")
    [('user:a@x.com', ['group:g@x.com']), ('b@x.com', [])]
    """
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CliError(f"{source}: not valid YAML or JSON: {e}") from None
    if not isinstance(data, list) or not data:
        raise CliError(f"{source}: expected a non-empty list of {{principal: MEMBER, groups: [...]}}")
    found = []
    for i, item in enumerate(data, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("principal"), str) or set(item) - {"principal", "groups"}:
            raise CliError(f"{source}: entry #{i}: expected {{principal: MEMBER, groups: [GROUP, ...]}}, got {item!r}")
        groups = item.get("groups") or []
        if isinstance(groups, str):
            groups = [g.strip() for g in groups.split(",") if g.strip()]
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise CliError(f"{source}: entry #{i}: groups must be a list of groups")
        found.append((item["principal"].strip(), groups))
    return found


def _principals(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    principals = [parse_principal_arg(text) for text in args.principals]
    if args.principals_file:
        path = Path(args.principals_file)
        if not path.is_file():
            raise CliError(f"--principals-file {args.principals_file}: no such file")
        principals += load_principals(path.read_text(encoding="utf-8"), args.principals_file)
    return principals


def _preview(client: AdminClient, args: argparse.Namespace, out: TextIO, **change: Unpack[_Change]) -> int:
    reply = client.preview_impact(_principals(args), **change)
    rows = [{"table": r.table, "principal": r.principal, "rows_now": r.rows_now, "rows_after": r.rows_after} for r in reply.rows]
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
        return 0
    _print_changes(reply.changes, out, dry_run=True)
    if not reply.changes:
        print("nothing would change", file=out)
        return 0
    header = ("TABLE", "PRINCIPAL", "GROUPS", "ROWS NOW", "ROWS AFTER", "CHANGE")
    table = [
        (
            r.table,
            r.principal,
            ", ".join(r.groups) or "-",
            str(r.rows_now),
            str(r.rows_after),
            f"{r.rows_after - r.rows_now:+d}" if r.rows_after != r.rows_now else "0",
        )
        for r in reply.rows
    ]
    print(f"impact (policies of version {reply.version}, rows counted by Spark; nothing was changed):", file=out)
    _print_rows(header, table, out, right=(3, 4, 5))
    return 0


# -- change output ----------------------------------------------------------------------------


def _counts(changes: Iterable[pb.PolicyChange]) -> dict[str, int]:
    counts = {"create": 0, "replace": 0, "drop": 0}
    for change in changes:
        counts[change.action] += 1
    return counts


def _print_changes(changes: Iterable[pb.PolicyChange], out: TextIO, *, dry_run: bool) -> None:
    from rowgate.admin.client import table_fields
    from rowgate.admin.policy_files import format_table

    past = {"create": "created", "replace": "replaced", "drop": "dropped"}
    for change in changes:
        policy = change.after if change.HasField("after") else change.before
        label = f"{format_table(table_fields(policy))} {policy.policy_name}"
        print(f"would {change.action} {label}" if dry_run else f"{past[change.action]} {label}", file=out)


def _print_rows(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, right: Container[int] = ()) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        print("  ".join(cells).rstrip(), file=out)


def _history_dict(entry: pb.HistoryEntry) -> dict[str, Any]:
    from rowgate.admin.client import timestamp_text

    def side(field: str) -> dict[str, Any] | None:
        if not entry.HasField(field):
            return None
        policy = getattr(entry, field)
        return {"grantees": list(policy.grantees), "filter": policy.filter_predicate}

    return {
        "version": entry.version,
        "change_time": timestamp_text(entry.change_time),
        "author": entry.author,
        "via": entry.via,
        "action": entry.action,
        "table": entry.table,
        "policy_name": entry.policy_name,
        "before": side("before"),
        "after": side("after"),
        "detail": entry.detail,
    }


ACTIONS = {
    "list": _list,
    "get": _get,
    "create": _create,
    "drop": _drop,
    "explain": _explain,
    "export": _export,
    "apply": _apply,
    "history": _history,
    "rollback": _rollback,
}


def main(argv: list[str] | None = None) -> int:
    return run_policies(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
