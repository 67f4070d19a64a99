"""Temp views pinned (issue 21, item 2): every relation goes out naming exactly one object.

Spark 4.3 resolves `system.session.<view>` to the session temp view or to nothing, never to
a table (checked against the real server, tests/integration/test_temp_views_pinned.py);
Spark 4.0 refuses the form, so there (`qualify_temp_views` False) temp views keep their
one-part names as before.
"""

from __future__ import annotations

import pytest

from tests.unit.rewrite.fakes import ORDERS_FQ, rw, shop, tn

TV = "`system`.`session`"


@pytest.fixture
def ctx():
    c = shop()
    c.temp("tv")
    return c


def test_temp_view_reads_are_qualified_as_temp_views(ctx):
    r = rw("SELECT tv.x, * FROM tv JOIN lineitem ON true", ctx)
    assert r.sql == f"SELECT tv.x, * FROM {TV}.`tv` JOIN `spark_catalog`.`default`.`lineitem` ON true"
    assert r.temp_views_read == {"tv"} and not r.unknown_relations


def test_a_temp_view_named_like_a_protected_table_is_read_as_the_temp_view_only(ctx):
    ctx.temp("orders")
    r = rw("SELECT * FROM orders o", ctx)
    assert r.sql == f"SELECT * FROM {TV}.`orders` o" and not r.filtered  # the alias as written
    # two and three parts still name the protected table, filtered
    assert rw("SELECT * FROM default.orders", ctx).filtered
    assert rw(f"SELECT * FROM {ORDERS_FQ}", ctx).filtered


def test_the_qualified_form_written_by_the_client_is_a_temp_view(ctx):
    for text in ("system.session.tv", "SYSTEM.Session.TV", "IDENTIFIER('system.session.tv')"):
        r = rw(f"SELECT * FROM {text}", ctx)
        assert r.temp_views_read == {"tv"} and not r.tables_read, text
    # never a catalog table, even when named like a protected one
    r = rw("SELECT * FROM system.session.orders", ctx)
    assert not r.filtered and r.temp_views_read == {"orders"} and not r.tables_read


def test_table_arguments_are_qualified(ctx):
    r = rw("SELECT * FROM my_udtf(TABLE(tv))", ctx)
    assert r.sql == f"SELECT * FROM MY_UDTF(TABLE({TV}.`tv`))"
    r = rw("SELECT * FROM my_udtf(TABLE(sink))", ctx)
    assert r.sql == f"SELECT * FROM MY_UDTF(TABLE({TV}.`sink`))" and r.unknown_relations == {"sink"}


def test_a_one_part_name_nothing_explains_goes_out_as_a_temp_view_and_is_reported(ctx):
    r = rw("SELECT * FROM sink WHERE value > 1", ctx)
    assert r.sql == f"SELECT * FROM {TV}.`sink` WHERE value > 1"
    assert r.unknown_relations == {"sink"} and not r.tables_read
    # a two-part name is a catalog name (or a `<format>.<path>` read), never a temp view...
    r = rw("SELECT * FROM sales.nothing", ctx)
    assert not r.unknown_relations and r.paths_read
    # ... except `session.<view>`, which Spark 4.3 reads as the temp view when one exists
    r = rw("SELECT * FROM session.tv", ctx)
    assert r.sql == f"SELECT * FROM {TV}.`tv`" and r.temp_views_read == {"tv"}


def test_ctes_and_view_texts_are_untouched(ctx):
    r = rw("WITH tv AS (SELECT 1 AS x) SELECT * FROM tv", ctx)
    assert r.sql == "WITH tv AS (SELECT 1 AS x) SELECT * FROM tv" and not r.temp_views_read
    ctx.view("v_tv", "SELECT * FROM lineitem")
    r = rw("SELECT * FROM v_tv", ctx)
    assert r.sql == "SELECT * FROM `spark_catalog`.`default`.`v_tv`"


def test_a_server_without_the_form_keeps_one_part_names(ctx):
    ctx.qualify_temp_views = False
    assert rw("SELECT * FROM tv", ctx).sql == "SELECT * FROM tv"
    r = rw("SELECT * FROM sink", ctx)
    assert r.sql == "SELECT * FROM sink" and not r.unknown_relations
    assert r.tables_read == {tn("sink")}
    # there `system.session.x` is no temp view either: an unknown catalog name
    r = rw("SELECT * FROM system.session.tv", ctx)
    assert not r.temp_views_read
    assert not rw("SELECT * FROM session.tv", ctx).temp_views_read  # 4.0 reads the table


def test_an_admins_unknown_name_goes_as_written(ctx):
    """Admins may turn on Spark's SQL path, through which a one-part name can be a table of
    another database; the second opinion checks what Spark resolved."""
    ctx.is_admin = True
    r = rw("SELECT * FROM sink", ctx)
    assert r.sql == "SELECT * FROM sink" and not r.unknown_relations
    assert rw("SELECT * FROM tv", ctx).sql == f"SELECT * FROM {TV}.`tv`"  # temp views still pinned
