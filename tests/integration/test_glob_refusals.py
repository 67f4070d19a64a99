"""A refused glob names the protected location it matches, not the first protected table
under the directory it starts in (proxy/rowgate/policy/path_allow_list.py): with two
protected tables side by side, a glob over the second's files is refused naming the second.
"""

from __future__ import annotations

import re
import tempfile

import pytest

from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def world(proxy_factory, spark_server, module_sessions):
    # Under an allowed prefix (the test Spark's warehouse is in the temp directory), so the
    # refusal is the one that names the protected location.
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-path", tempfile.gettempdir())
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    db = unique("globs")
    admin.sql(f"CREATE DATABASE {db}")
    for name in ("aaa_first", "zzz_second"):
        admin.sql(f"CREATE TABLE {db}.{name} (id INT, owner STRING) USING parquet")
        admin.sql(f"INSERT INTO {db}.{name} VALUES (1, 'x')")
        admin.sql(f"CREATE ROW ACCESS POLICY p ON {db}.{name} GRANT TO ('user:nobody@example.com') FILTER USING (TRUE)")
    direct = module_sessions(spark_server.url)
    rows = [r for r in direct.sql(f"DESCRIBE TABLE EXTENDED {db}.zzz_second").collect() if r[0] == "Location"]
    yield module_sessions(remote_url(proxy.url, user="user:mallory@example.com")), db, re.sub(r"^file:(//)?", "", rows[0][1])
    direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


@pytest.mark.parametrize("glob", ["{d}/zzz_sec*", "{d}/zzz_second/*.parquet", "{d}/[z]zz_second", "{d}/{{zzz_second,nothing}}"])
def test_a_refused_glob_names_the_table_it_matches(world, glob):
    mallory, db, location = world
    path = glob.format(d=location.rsplit("/", 1)[0])
    with pytest.raises(Exception) as raised:
        mallory.read.parquet(path).collect()
    text = str(raised.value)
    assert grpc_status(raised.value) == "PERMISSION_DENIED", text[:600]
    assert f"{db}.zzz_second".lower() in text.lower() and "aaa_first" not in text, text[:600]
