"""The path allow list: only under allowed prefixes, never the forbidden places, read as Hadoop reads."""

from __future__ import annotations

import pytest

from rowgate.policy.path_allow_list import NOT_ALLOWED, Forbidden, PathAllowList

RULES = PathAllowList(["/data/landing", "s3a://bucket/shared"])
DATA = Forbidden("/data/landing/.rowgate", "the proxy's data directory")
SPILL = Forbidden("/tmp", "Spark's spill and scratch files", ("blockmgr-", "spark-"))


@pytest.mark.parametrize(
    "path",
    [
        "/data/landing/a.csv",
        "file:/data/landing/a.csv",
        "FILE:///data/landing//2024/./a.csv",
        "/data/landing/2024/*.csv",
        "S3A://bucket/shared/x.parquet",
    ],
)
def test_paths_under_an_allowed_prefix_pass(path):
    assert RULES.refusal(path, [DATA]) is None


@pytest.mark.parametrize(
    "path, why",
    [
        ("/data/landing-2/a.csv", NOT_ALLOWED),
        ("/data/lan*/a.csv", NOT_ALLOWED),
        ("/data/{landing,secret}/a.csv", NOT_ALLOWED),
        ("/data/landing/../secret/a.csv", "'..'"),
        ("/data/landing/{a,..}/secret", "'..'"),
        ("s3a://bucket/shared/../private", "'..'"),
        ("s3a://bucket/sharedx", NOT_ALLOWED),
        ("landing/a.csv", "relative"),
        ("file:landing/a.csv", "relative"),
        ("file://host/data/landing/a.csv", "relative"),
        ("", "empty"),
        ("/data/landing/.rowgate/policies.db-wal", "the proxy's data directory"),
        ("/data/landing/.row*", "the proxy's data directory"),
        ("/data/landing", "the proxy's data directory"),  # a directory holding it
    ],
)
def test_other_paths_are_refused(path, why):
    assert why in (RULES.refusal(path, [DATA]) or "")


def test_only_sparks_own_children_of_a_shared_directory_are_forbidden():
    tmp = PathAllowList(["/tmp"])
    assert tmp.refusal("/tmp/pytest-1/a.csv", [SPILL]) is None
    assert tmp.refusal("/tmp/pytest-1/*.csv", [SPILL]) is None
    for path in ("/tmp/blockmgr-9/0c/shuffle_0.data", "/tmp/spark-1/userFiles/x", "/tmp/*", "/tmp", "/tmp/sp*/x"):
        assert "Spark's spill" in (tmp.refusal(path, [SPILL]) or ""), path


@pytest.mark.parametrize("prefix", ["relative/dir", "/data/*", "/data/../etc", "file:x"])
def test_the_operator_can_only_allow_absolute_plain_prefixes(prefix):
    with pytest.raises(ValueError):
        PathAllowList([prefix])


# Two protected tables side by side: a glob under their common directory reaches both (the
# decision errs towards "yes"), but the refusal names the one the glob itself matches.
TABLES = [Forbidden("/wh/db/accounts", "the files of db.accounts"), Forbidden("/wh/db/orders", "the files of db.orders")]


@pytest.mark.parametrize(
    "glob",
    [
        "/wh/db/ord*",
        "/wh/db/ord?rs",
        "/wh/db/[o]rders",
        "/wh/db/{orders}",
        "/wh/db/{x,ord}ers/part-*",
        "FILE:/wh/db/o*/*.parquet",
        "/wh/{db/orders,elsewhere}",
    ],
)
def test_a_refused_glob_names_the_protected_location_it_matches(glob):
    why = PathAllowList(["/wh"]).refusal(glob, TABLES) or ""
    assert "db.orders (/wh/db/orders)" in why and "accounts" not in why, why


def test_a_glob_matching_no_location_exactly_is_still_refused():
    """Only the name changes: the decision still counts the glob as all it could expand to."""
    why = PathAllowList(["/wh"]).refusal("/wh/db/zz*", TABLES) or ""
    assert "never readable by path" in why
    assert "db.accounts" in PathAllowList(["/wh"]).refusal("/wh/*", TABLES)  # both match: the first
