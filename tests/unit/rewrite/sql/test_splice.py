"""Issue #22: the forwarded text is the client's, with only rowgate's edits spliced in.

Every character the proxy does not edit is the client's; the edits are exactly the
protected reads wrapped, the names pinned and the identity functions bound. Where Spark's
lexer may read the client's text differently from sqlglot's, or the splice cannot be
verified, the statement is the proxy's canonical rendering, as before (issue #12).
"""

import pytest
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from rowgate.refusal import Refusal
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.canonical import spark_strings
from rowgate.rewrite.sql.splice import edits, lexer_safe, parse_with_spans, reads_as, splice
from rowgate.rewrite.sql.wrap import render
from tests.unit.rewrite.fakes import ALICE_ORDERS, rw, shop

FQ = "`spark_catalog`.`default`"
BS = "\\"


@pytest.fixture
def ctx():
    return shop()


def tokens(sql: str):
    return spark_strings(Spark().tokenize(sql), sql)


# -- edits are exact, everything else verbatim ------------------------------------------------


@pytest.mark.parametrize(
    "sql, out",
    [
        # functions sqlglot would rename or re-shape stay as written
        (
            "select approx_percentile(qty, 0.5), array_size(array(1)), struct(order_id, qty), nvl(qty, 0) from lineitem",
            f"select approx_percentile(qty, 0.5), array_size(array(1)), struct(order_id, qty), nvl(qty, 0) from {FQ}.`lineitem`",
        ),
        # literals and syntax sqlglot re-types or does not render back
        (
            "select 127Y, -128Y, X'1010', CAST(TIME '00:01:52' AS INT)",
            "select 127Y, -128Y, X'1010', CAST(TIME '00:01:52' AS INT)",
        ),
        ("SELECT 3 AS x, 4 AS y |> AGGREGATE GROUP BY 1, 2", "SELECT 3 AS x, 4 AS y |> AGGREGATE GROUP BY 1, 2"),
        ("select collate('aaa', 'utf8_binary')", "select collate('aaa', 'utf8_binary')"),
        # a pinned name replaces the name parts only: alias, comment and sample stay
        (
            "SELECT l.qty FROM lineitem /* c */ l TABLESAMPLE (10 PERCENT) WHERE l.qty > 1",
            f"SELECT l.qty FROM {FQ}.`lineitem` /* c */ l TABLESAMPLE (10 PERCENT) WHERE l.qty > 1",
        ),
        # a protected read: only the FROM item changes
        (
            "SELECT  o.id ,nvl(o.amount, 0)\nFROM orders o -- mine\nWHERE o.id > 1",
            f"SELECT  o.id ,nvl(o.amount, 0)\nFROM {ALICE_ORDERS} AS o -- mine\nWHERE o.id > 1",
        ),
        # a qualifier naming the wrapped table is cut down to its alias
        ("SELECT default.orders.id FROM default.orders", f"SELECT orders.id FROM {ALICE_ORDERS} AS orders"),
        # identity functions: bound, and a projection keeps Spark's column name
        (
            "select upper(current_user) as u, session_user(), user() from lineitem",
            "select upper('alice@example.com') as u, 'alice@example.com' AS `session_user()`, "
            f"'alice@example.com' AS `user()` from {FQ}.`lineitem`",
        ),
        # nothing to edit: the client's exact text, trailing semicolons and all
        ("select 1 ; ;  \n", "select 1 ; ;  \n"),
        ("SELECT /*+ BROADCAST(l) */ * FROM lineitem l", f"SELECT /*+ BROADCAST(l) */ * FROM {FQ}.`lineitem` l"),
    ],
)
def test_edits_are_exact_and_the_rest_verbatim(ctx, sql, out):
    assert rw(sql, ctx).sql == out


def test_the_edits_are_the_nodes_rowgate_changed():
    sql = "SELECT nvl(a, b), current_user() FROM db.t x"
    toks = tokens(sql)
    tree = parse_with_spans(toks, sql)[0]
    pristine = tree.copy()
    tree.find(exp.CurrentUser).replace(exp.Literal.string("e"))
    table = tree.find(exp.Table)
    table.set("catalog", exp.to_identifier("c", quoted=True))
    assert edits(pristine, tree) == [(18, 31, "'e'"), (38, 41, "`c`.db.t")]
    assert splice(sql, toks, pristine, tree) == "SELECT nvl(a, b), 'e' FROM `c`.db.t x"
    assert edits(pristine, pristine.copy()) == []


def test_a_splice_sqlglot_reads_otherwise_is_not_used():
    assert reads_as("SELECT a FROM t", render(Spark().parse("SELECT a FROM t")[0]))
    assert not reads_as("SELECT a FROM t x", render(Spark().parse("SELECT a FROM t")[0]))
    assert not reads_as("SELECT (", "SELECT 1")


def test_a_node_without_a_source_span_falls_back():
    sql = "SELECT a FROM t"
    toks = tokens(sql)
    tree = parse_with_spans(toks, sql)[0]
    pristine = tree.copy()
    for node in pristine.walk():
        node._meta = None
    tree.find(exp.Column).replace(exp.column("b"))
    assert splice(sql, toks, pristine, tree) is None


# -- the lexer differentials: never copied, the proxy's rendering instead ---------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM lineitem -- " + BS + "\n/*\n, orders\n-- */",
        "SELECT * FROM lineitem -- a " + BS + " \nWHERE qty > 1",
        "SELECT * FROM lineitem /* a /* nested */ comment */",
        "SELECT * FROM lineitem /* 'quoted */",
        "SELECT * FROM lineitem l /*+ BROADCAST(l) */",
        "select\t*\r\nfrom\flineitem",
        "SELECT\u00a0* FROM lineitem",
        "SELECT 'x" + BS + "u0041' FROM lineitem",
        "SELECT 'x" + BS + "U0001F600' FROM lineitem",
        "SELECT 'x" + BS + "101' FROM lineitem",
        "SELECT U&'" + BS + "0041' FROM lineitem",
    ],
)
def test_texts_spark_may_read_differently_are_rendered(ctx, sql):
    out = rewrite_sql(sql, ctx).sql
    assert lexer_safe(sql, tokens(sql)) is not None
    assert "--" not in out and "/*" not in out.replace("/*+", "") and out.startswith("SELECT")
    assert f"{FQ}.`lineitem`" in out


def test_pipe_syntax_naming_sqlglots_ctes_is_rendered(ctx):
    """sqlglot reads |> as CTEs named __tmpN; a text naming __tmp anything gets the rendering."""
    out = rw("FROM lineitem |> WHERE qty > 1 |> SELECT order_id AS __tmp1", ctx).sql
    assert "|>" not in out and out.startswith("WITH")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'it''s', 'a" + BS + "'b', 'a" + BS + BS + "d', 'tab" + BS + "there' FROM t -- fine /* still */",
        "SELECT `i``d`, X'0F', 1.5e3, 10BD, a >= b FROM t WHERE s LIKE 'a%' ORDER BY 1 LIMIT 2",
        "SELECT /*+ REPARTITION(2) */ a FROM t /* block */ GROUP BY a",
        "SELECT \"dq\", \"a\"\"b\", DATE'2024-01-01', timestamp_ntz'2024-01-01 00:00:00', TIME '12:00' FROM t",
        # not a unicode escape (fewer hex digits): the letter, to Spark and sqlglot alike
        "SELECT '%SystemDrive%" + BS + "Users" + BS + "John' LIKE '" + BS + "%SystemDrive" + BS + "%" + BS * 2 + "Users%'",
        "SELECT '" + BS + "u12g4', '" + BS + "U0041' FROM t",
    ],
)
def test_texts_both_lexers_read_alike_are_safe(sql):
    assert lexer_safe(sql, tokens(sql)) is None


def test_a_one_letter_prefix_is_not_copied():
    sql = "SELECT E'x', N'y'"
    assert lexer_safe(sql, tokens(sql)) == "a prefixed string literal"


def test_unsigned_shift_renders_as_spark_reads_it(ctx):
    """`>>>` is read as shiftrightunsigned, so the canonical rendering means the same."""
    # sqlglot alone cannot parse it (so not through `rw`, which reparses with sqlglot)
    r = rewrite_sql("select 4 >>> 1, qty >>> 1 from lineitem", ctx)
    assert r.sql == f"select 4 >>> 1, qty >>> 1 from {FQ}.`lineitem`"
    assert rewrite_sql("select 4 >>> 1 -- " + BS, ctx).sql == "SELECT SHIFTRIGHTUNSIGNED(4, 1)"


def test_describe_column_form_is_rendered(ctx):
    assert rw("describe  lineitem qty", ctx).sql == f"DESCRIBE {FQ}.`lineitem` `qty`"


def test_positional_parameters_are_rendered(ctx):
    r = rewrite_sql("select nvl(qty, ?) from lineitem", ctx, args=[1])
    assert r.sql == f"SELECT COALESCE(qty, ?) FROM {FQ}.`lineitem`"


def test_the_proxys_own_filter_is_its_rendering_not_the_clients(ctx):
    """A derived table recognised as already filtered is recognised by sqlglot's reading, so
    Spark gets the proxy's rendering of it, whatever the client wrote inside."""
    inner = ALICE_ORDERS.replace("SELECT *", "SELECT * /* c */")
    r = rw(f"select o.id from {inner} AS o", ctx)
    assert r.filtered and r.sql == f"select o.id from {ALICE_ORDERS} AS o"


def test_unprotected_and_unchanged_is_byte_for_byte(ctx):
    ctx.policies.clear()
    sql = "select  nvl(qty, 0) from lineitem -- " + BS + "\n"
    assert rewrite_sql(sql, ctx).sql == sql
    r = rw("select current_user() -- c", ctx)
    assert r.sql == "select 'alice@example.com' AS `current_user()` -- c"


@pytest.mark.parametrize("sql", ["SELECT r'a" + BS + "' FROM lineitem", "SELECT X 'F0', x '1f' FROM lineitem"])
def test_raw_strings_and_spaced_binary_literals_are_spliced(ctx, sql):
    """Spark ends a raw string at the next quote like sqlglot, and reads `X 'F0'` as the
    binary literal `X'F0'` (canonical.spark_strings): the client's text is kept."""
    assert lexer_safe(sql, tokens(sql)) is None
    assert rewrite_sql(sql, ctx).sql == sql.replace("lineitem", f"{FQ}.`lineitem`")


@pytest.mark.parametrize(
    "sql",
    [
        "TABLE lineitem",
        "TABLE lineitem LIMIT 1",
        "TABLE lineitem |> UNION ALL TABLE lineitem |> ORDER BY 1",
        "TABLE lineitem |> INTERSECT DISTINCT TABLE lineitem",
        "TABLE lineitem |> EXCEPT (SELECT * FROM lineitem) |> WHERE true",
    ],
)
def test_table_and_pipe_set_operations_are_spliced(ctx, sql):
    """`TABLE t` and Spark's `|> UNION ALL TABLE t` keep the client's text (issue #22)."""
    assert rewrite_sql(sql, ctx).sql == sql.replace("lineitem", f"{FQ}.`lineitem`")


def test_a_protected_table_in_a_pipe_set_operation_is_filtered(ctx):
    out = rewrite_sql("TABLE lineitem |> UNION ALL TABLE orders", ctx).sql
    assert "`orders` WHERE" in out and out.count("SPARK_PARTITION_ID() >= 0") == 1


def test_sqlglot_failing_on_a_form_is_a_refusal_not_an_internal_error(ctx):
    with pytest.raises(Refusal, match="sqlglot could not read"):
        rewrite_sql("TABLE lineitem |> LIMIT 1 OFFSET 1", ctx)
