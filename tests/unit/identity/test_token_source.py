from __future__ import annotations

import json
import logging
import os

import pytest

from rowgate.identity import watched_file
from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityConfigError, IdentityError
from rowgate.identity.token_source import StaticTokenSource
from tests.unit.identity.tokens import bearer

YAML = """\
- token: tok-alice-0123456789
  principal: Alice@Example.com
  groups: [eng@example.com, "group:ops@EXAMPLE.com"]
- token: tok-etl-0123456789
  principal: serviceAccount:etl@proj.example.com
"""

ALICE = Caller("user:Alice@example.com", frozenset({"eng@example.com", "ops@example.com"}))
ETL = Caller("serviceAccount:etl@proj.example.com")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path, text: str) -> None:
    """Write and move the mtime on, so a rewrite within one clock tick is still a change."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    after = max(path.stat().st_mtime_ns, before + 10**9)
    os.utime(path, ns=(after, after))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    write(path, YAML)
    return path


def test_yaml_file(token_file):
    source = StaticTokenSource(token_file)
    assert source.resolve(bearer("tok-alice-0123456789")) == ALICE
    assert source.resolve(bearer("tok-etl-0123456789")) == ETL


def test_json_file(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"token": "tok-1", "principal": "user:bob@example.com", "groups": ["g@example.com"]}]))
    assert StaticTokenSource(path).resolve(bearer("tok-1")) == Caller("user:bob@example.com", frozenset({"g@example.com"}))


def test_unknown_token(token_file):
    with pytest.raises(IdentityError) as info:
        StaticTokenSource(token_file).resolve(bearer("tok-guess-0123456789"))
    assert str(info.value) == "token: unknown token"


@pytest.mark.parametrize("token", ["tok-alice-012345678", "tok-alice-01234567890", "TOK-ALICE-0123456789"])
def test_near_misses_are_unknown(token_file, token):
    with pytest.raises(IdentityError, match="unknown token"):
        StaticTokenSource(token_file).resolve(bearer(token))


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"authorization": "Basic dXNlcjpwdw=="},
        bearer("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"),  # JWT-shaped: the jwt source's
        {"x-rowgate-user": "user:alice@example.com"},
    ],
)
def test_not_claimed(token_file, metadata):
    assert StaticTokenSource(token_file).resolve(metadata) is None


def test_empty_bearer(token_file):
    with pytest.raises(IdentityError, match="^token: malformed bearer credential"):
        StaticTokenSource(token_file).resolve({"authorization": "Bearer"})


def test_empty_file_knows_no_tokens(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text("")
    with pytest.raises(IdentityError, match="unknown token"):
        StaticTokenSource(path).resolve(bearer("anything"))


SECRET_TOKEN = "s3cret-token-value"

BAD_FILES = [
    ("- token: [unclosed\n", "not valid YAML (line 2)"),
    (f"- token: {SECRET_TOKEN}\n  principal: 'unclosed\n", "not valid YAML"),
    ("token: abc\nprincipal: a@example.com\n", "must hold a list"),
    ("- just-a-string\n", "entry 1: must be a mapping"),
    (f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n  group: [g@example.com]\n", "entry 1: unknown key(s) group"),
    ("- token: 12345\n  principal: a@example.com\n", "entry 1: token must be a string (quote it in YAML)"),
    ("- principal: a@example.com\n", "entry 1: token must be a string"),
    ("- token: ''\n  principal: a@example.com\n", "entry 1: token must be non-empty"),
    ("- token: 'has space'\n  principal: a@example.com\n", "entry 1: token must be non-empty and use only"),
    ("- token: 'caf\u00e9'\n  principal: a@example.com\n", "entry 1: token must be non-empty and use only"),
    ("- token: aaa.bbb.ccc\n  principal: a@example.com\n", "entry 1: token is shaped like a JWT"),
    (
        f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n- token: {SECRET_TOKEN}\n  principal: b@example.com\n",
        "entry 2: token repeats",
    ),
    (f"- token: {SECRET_TOKEN}\n", "entry 1: principal must be a string"),
    (f"- token: {SECRET_TOKEN}\n  principal: alice\n", "entry 1: email 'alice' must contain exactly one '@'"),
    (f"- token: {SECRET_TOKEN}\n  principal: group:eng@example.com\n", "entry 1: principal 'group:eng@example.com' must be"),
    (f"- token: {SECRET_TOKEN}\n  principal: User:a@example.com\n", "entry 1: unknown member kind 'User'"),
    (f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n  groups: g@example.com\n", "entry 1: groups must be a list"),
    (f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n  groups: [3]\n", "entry 1: groups must be a list"),
    (f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n  groups: [eng]\n", "entry 1: email 'eng'"),
    (f"- token: {SECRET_TOKEN}\n  principal: a@example.com\n  groups: ['user:x@example.com']\n", "must be a group:"),
]


@pytest.mark.parametrize("content, message", BAD_FILES)
def test_invalid_at_start(tmp_path, content, message):
    path = tmp_path / "tokens.yaml"
    path.write_text(content)
    with pytest.raises(IdentityConfigError) as info:
        StaticTokenSource(path)
    text = str(info.value)
    assert text.startswith(f"token file {path}: ")
    assert message in text
    assert SECRET_TOKEN not in text


@pytest.mark.parametrize(
    "content, message",
    [("[{", "not valid JSON (line 1)"), ('{"token": "x"}', "must hold a list"), (b"\xff\xfe", "not UTF-8")],
)
def test_invalid_json_at_start(tmp_path, content, message):
    path = tmp_path / "tokens.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(IdentityConfigError) as info:
        StaticTokenSource(path)
    assert message in str(info.value)


def test_missing_at_start(tmp_path):
    with pytest.raises(IdentityConfigError, match="token file .*nope.yaml: No such file"):
        StaticTokenSource(tmp_path / "nope.yaml")


def test_directory_at_start(tmp_path):
    with pytest.raises(IdentityConfigError, match="token file"):
        StaticTokenSource(tmp_path)


# --- reloading ---------------------------------------------------------------------------

NEW_YAML = "- token: tok-new-0123456789\n  principal: new@example.com\n"


def test_reload_on_change(token_file, clock):
    source = StaticTokenSource(token_file, clock=clock)
    write(token_file, NEW_YAML)
    clock.now = 0.5  # within the interval: not looked at yet
    assert source.resolve(bearer("tok-alice-0123456789")) == ALICE
    clock.now = 1.0
    assert source.resolve(bearer("tok-new-0123456789")) == Caller("user:new@example.com")
    with pytest.raises(IdentityError, match="unknown token"):  # revoked by the rewrite
        source.resolve(bearer("tok-alice-0123456789"))


def test_reload_after_atomic_replace(token_file, clock):
    source = StaticTokenSource(token_file, clock=clock)
    staged = token_file.with_name("tokens.yaml.tmp")
    write(staged, NEW_YAML)
    os.replace(staged, token_file)
    clock.now = 2.0
    assert source.resolve(bearer("tok-new-0123456789")) is not None


def test_hot_path_stats_at_most_once_per_interval(token_file, clock, monkeypatch):
    source = StaticTokenSource(token_file, clock=clock)
    calls = []
    real_stat = os.stat
    monkeypatch.setattr(watched_file.os, "stat", lambda p: calls.append(p) or real_stat(p))
    for _ in range(100):
        source.resolve(bearer("tok-alice-0123456789"))
    assert calls == []
    clock.now = 1.0
    for _ in range(100):
        source.resolve(bearer("tok-alice-0123456789"))
    assert len(calls) == 1


def test_unchanged_file_is_not_reparsed(token_file, clock, monkeypatch):
    source = StaticTokenSource(token_file, clock=clock)
    monkeypatch.setattr(type(token_file), "read_bytes", lambda self: pytest.fail("re-read an unchanged file"))
    clock.now = 5.0
    assert source.resolve(bearer("tok-etl-0123456789")) == ETL


def test_deleted_file_keeps_last_good_copy(token_file, clock, caplog):
    source = StaticTokenSource(token_file, clock=clock)
    token_file.unlink()
    with caplog.at_level(logging.WARNING, logger="rowgate.identity"):
        for second in range(1, 4):
            clock.now = float(second)
            assert source.resolve(bearer("tok-alice-0123456789")) == ALICE
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keeping the last good copy" in warnings[0].getMessage()
    write(token_file, NEW_YAML)
    clock.now = 10.0
    assert source.resolve(bearer("tok-new-0123456789")) is not None


def test_unreadable_file_keeps_last_good_copy(token_file, clock, caplog):
    source = StaticTokenSource(token_file, clock=clock)
    token_file.unlink()
    token_file.mkdir()  # present but unreadable as a file, whoever runs the tests
    clock.now = 1.0
    with caplog.at_level(logging.WARNING, logger="rowgate.identity"):
        assert source.resolve(bearer("tok-etl-0123456789")) == ETL
    assert "could not reload token file" in caplog.text


@pytest.mark.parametrize("content", ["- token: [unclosed\n", "- token: x\n  principal: nobody\n", "{}"])
def test_invalid_file_keeps_last_good_copy(token_file, clock, caplog, content):
    source = StaticTokenSource(token_file, clock=clock)
    write(token_file, content)
    with caplog.at_level(logging.WARNING, logger="rowgate.identity"):
        clock.now = 1.0
        assert source.resolve(bearer("tok-alice-0123456789")) == ALICE
        clock.now = 2.0
        assert source.resolve(bearer("tok-alice-0123456789")) == ALICE
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert "tok-alice" not in caplog.text
    write(token_file, NEW_YAML)  # fixed: picked up on the next check
    clock.now = 3.0
    assert source.resolve(bearer("tok-new-0123456789")) is not None


def test_successful_reload_is_logged(token_file, clock, caplog):
    source = StaticTokenSource(token_file, clock=clock)
    write(token_file, NEW_YAML)
    clock.now = 1.0
    with caplog.at_level(logging.INFO, logger="rowgate.identity"):
        source.resolve(bearer("tok-new-0123456789"))
    assert "reloaded token file" in caplog.text
