"""A refused glob names the protected location it matches, not the first protected table
under the directory it starts in (proxy/rowgate/policy/path_allow_list.py): with two
protected tables side by side, a glob over the second's files is refused naming the second.
"""

from __future__ import annotations

import re
import tempfile

import pytest

from tests.harness.callers import ADMIN
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def world(proxy_factory, spark_server, module_sessions):
    # Under an allowed prefix (the test Spark's warehouse is in the temp directory), so the
    # refusal is the one that names the protected location.
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-path", tempfile.gettempdir())
    declared = []
    for name in ("aaa_first", "zzz_second"):
        declared += [
            Table(name, "id INT, owner STRING", rows=[values([(1, "x")])]),
            Policy("p", name, "TRUE", grantees=["user:nobody@example.com"]),
        ]
    w = protected_world(proxy, module_sessions, *declared, database="globs", spark_url=spark_server.url)
    rows = [r for r in w.direct.sql(f"DESCRIBE TABLE EXTENDED {w.db}.zzz_second").collect() if r[0] == "Location"]
    yield w.caller("user:mallory@example.com"), w.db, re.sub(r"^file:(//)?", "", rows[0][1])
    w.close()


@pytest.mark.parametrize("glob", ["{d}/zzz_sec*", "{d}/zzz_second/*.parquet", "{d}/[z]zz_second", "{d}/{{zzz_second,nothing}}"])
def test_a_refused_glob_names_the_table_it_matches(world, glob):
    mallory, db, location = world
    path = glob.format(d=location.rsplit("/", 1)[0])
    with pytest.raises(Exception) as raised:
        mallory.read.parquet(path).collect()
    text = str(raised.value)
    assert grpc_status(raised.value) == "PERMISSION_DENIED", text[:600]
    assert f"{db}.zzz_second".lower() in text.lower() and "aaa_first" not in text, text[:600]
