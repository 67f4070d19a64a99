"""Configuration of `rowgate serve`: flags, environment variables and a config file.

Every flag has all three forms so the same settings work on a laptop (flags), in a
container (environment) and in Kubernetes (a mounted file): `--policy-store X`,
`ROWGATE_POLICY_STORE=X` and `policy_store: X` in the YAML file given by `--config`.
Precedence: flag, then environment, then file, then the default. A setting whose name ends
in `_file` reads a secret from a mounted file rather than taking it inline.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "ROWGATE_"


class ConfigError(ValueError):
    pass


@dataclass
class ServeConfig:
    listen: str = "127.0.0.1:15002"
    upstream: str | None = None  # None: start the embedded Spark Connect server
    upstream_ca_file: str | None = None
    upstream_token_file: str | None = None
    data_dir: str = ".rowgate"
    spark_driver_memory: str = "1g"
    spark_conf: list[str] = field(default_factory=list)  # key=value, for the embedded server
    tls_cert: str | None = None
    tls_key: str | None = None
    max_message_mb: int = 256
    shutdown_grace_seconds: float = 30.0
    catalog_timeout_seconds: float = 30.0  # one upstream catalog question (DESCRIBE ...)
    max_sql_kib: int = 1024  # SQL text one request may have the proxy read (rewrite/sql/text_budget.py)
    checks_per_caller: int = 2  # a caller's checks under way at once (pipeline/enforce/caller_lanes.py)
    log_level: str = "info"
    event_loop: str = "uvloop"  # or "asyncio"
    # identity
    identity: str = "header"  # comma-separated, in order: jwt,token,header
    require_auth: bool = False
    trust_headers_from_network: bool = False
    admin: list[str] = field(default_factory=list)
    jwt_secret_file: str | None = None
    jwt_public_key_file: str | None = None
    jwt_jwks_file: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_principal_claim: str = "email"
    jwt_groups_claim: str = "groups"
    token_file: str | None = None
    # policy store
    policy_store: str | None = None  # default: sqlite under data_dir
    # refused-by-default routes (non-admins)
    allow_python_udfs: bool = False
    allow_artifacts: bool = False
    allow_java_udfs: bool = False
    allow_script_transform: bool = False
    allow_reflect: bool = False
    no_second_opinion: bool = False  # skip Spark's check of every protected read (pipeline/enforce/second_opinion.py)
    allow_path: list[str] = field(default_factory=list)  # prefixes non-admins may read/write by path
    # observability
    metrics_listen: str | None = None

    @property
    def listen_host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def listen_is_loopback(self) -> bool:
        host = self.listen_host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def identity_sources(self) -> list[str]:
        return [s.strip() for s in self.identity.split(",") if s.strip() and s.strip() != "none"]

    def resolved_policy_store(self) -> str:
        if self.policy_store:
            return self.policy_store
        return f"sqlite:///{(Path(self.data_dir) / 'policies.db').resolve()}"

    def validate(self) -> None:
        if ":" not in self.listen:
            raise ConfigError(f"--listen must be HOST:PORT, got {self.listen!r}")
        if self.max_sql_kib < 1 or self.checks_per_caller < 1:
            raise ConfigError("--max-sql-kib and --checks-per-caller must be at least 1")
        if self.event_loop not in ("uvloop", "asyncio"):
            raise ConfigError(f"--event-loop must be uvloop or asyncio, got {self.event_loop!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        unknown = set(self.identity_sources) - {"jwt", "token", "header"}
        if unknown:
            raise ConfigError(f"--identity: unknown source(s) {sorted(unknown)}; choose from jwt, token, header")
        if "header" in self.identity_sources and not self.listen_is_loopback and not self.trust_headers_from_network:
            raise ConfigError(
                "--identity header trusts x-rowgate-user from anyone who can reach the port; on the non-loopback "
                f"address {self.listen_host} it needs --trust-headers-from-network (only behind a trusted hop)"
            )


_HELP = {
    "listen": "address the proxy listens on (HOST:PORT)",
    "upstream": "Spark Connect URL to forward to (sc://host:port/;token=...;use_ssl=true); "
    "omitted: start an embedded Spark Connect server",
    "upstream_ca_file": "CA bundle for TLS to the upstream",
    "upstream_token_file": "file holding the upstream's bearer token (instead of ;token= in the URL)",
    "data_dir": "where the embedded Spark keeps its warehouse and metastore, and the default policy store",
    "spark_driver_memory": "driver memory of the embedded Spark Connect server",
    "spark_conf": "extra KEY=VALUE Spark conf for the embedded server (repeatable)",
    "tls_cert": "PEM certificate for TLS on the listening port",
    "tls_key": "PEM private key for TLS on the listening port",
    "max_message_mb": "largest gRPC message accepted or sent, in MiB",
    "shutdown_grace_seconds": "how long running streams may finish after SIGTERM",
    "catalog_timeout_seconds": "how long one catalog question to the upstream (a table lookup, the session state version) may take before the query is refused (UNAVAILABLE)",
    "max_sql_kib": "SQL text (KiB) one request may have rowgate read; past it the request is refused "
    "while tables are protected (INVALID_ARGUMENT)",
    "checks_per_caller": "checks (rewrite and second opinion) one caller may have under way at once; "
    "the caller's further requests wait behind its own, never other callers'",
    "log_level": "debug, info, warning or error",
    "event_loop": "uvloop (default; about 7%% less proxy CPU per request) or asyncio",
    "identity": "identity sources in order, comma-separated: jwt, token, header (or none)",
    "require_auth": "refuse callers with no credential (UNAUTHENTICATED) instead of treating them as anonymous",
    "trust_headers_from_network": "allow --identity header on a non-loopback address (only behind a trusted hop)",
    "admin": "member allowed to manage policies and use refused routes, e.g. user:ops@example.com (repeatable)",
    "jwt_secret_file": "file holding the HS256 shared secret",
    "jwt_public_key_file": "PEM public key (RS256 or ES256)",
    "jwt_jwks_file": "JWKS file (keys chosen by kid)",
    "jwt_issuer": "required iss claim",
    "jwt_audience": "required aud claim",
    "jwt_principal_claim": "claim holding the principal (falls back to sub)",
    "jwt_groups_claim": "claim holding the caller's groups",
    "token_file": "static token file (YAML/JSON list of token, principal, groups); re-read on change",
    "policy_store": "sqlite:///path.db or postgresql://... (default: sqlite under --data-dir)",
    "allow_python_udfs": "let non-admins run Python UDFs/UDTFs/data sources and ship Python files",
    "allow_artifacts": "let non-admins upload jars, classes and other artifacts",
    "allow_java_udfs": "let non-admins register Java/Scala UDFs",
    "allow_script_transform": "let non-admins run TRANSFORM ... USING scripts",
    "allow_reflect": "let non-admins call reflect()/java_method()",
    "no_second_opinion": "do not ask Spark's analyzer to confirm that every protected read is filtered "
    "(saves one or two AnalyzePlan calls per statement seen for the first time; removes the net under rewrite mistakes)",
    "allow_path": "let non-admins read, write and name files under this prefix while tables are protected "
    "(repeatable; the data dir, policy store and Spark's own directories stay refused)",
    "metrics_listen": "HOST:PORT for Prometheus metrics (off when unset)",
}


def _env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _parse_bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"not a boolean: {text!r}")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML file with any of the settings below (keys use underscores)")
    for f in fields(ServeConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{_HELP.get(f.name, '')} [env {_env_name(f.name)}]"
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action="store_const", const=True, default=None, help=help_text)
        elif f.type in ("list[str]",):
            parser.add_argument(flag, dest=f.name, action="append", default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, help=help_text)


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServeConfig:
    env: Mapping[str, str] = os.environ if environ is None else environ
    file_values: dict = {}
    config_path = args.config or env.get(_env_name("config"))
    if config_path:
        try:
            file_values = yaml.safe_load(Path(config_path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read config file {config_path}: {e}") from e
        if not isinstance(file_values, dict):
            raise ConfigError(f"config file {config_path} must hold a mapping of settings")
        unknown = set(file_values) - {f.name for f in fields(ServeConfig)}
        if unknown:
            raise ConfigError(f"config file {config_path}: unknown settings {sorted(unknown)}")
    config = ServeConfig()
    for f in fields(ServeConfig):
        value = getattr(args, f.name, None)
        if value is None and _env_name(f.name) in env:
            value = env[_env_name(f.name)]
            if f.type == "list[str]":
                value = [v.strip() for v in value.split(",") if v.strip()]
        if value is None and f.name in file_values:
            value = file_values[f.name]
        if value is None:
            continue
        setattr(config, f.name, _coerce(f, value))
    config.validate()
    return config


def _coerce(f: Field[Any], value: Any) -> bool | int | float | list[str] | str:
    try:
        if f.type == "bool":
            return value if isinstance(value, bool) else _parse_bool(value)
        if f.type == "int":
            return int(value)
        if f.type == "float":
            return float(value)
        if f.type == "list[str]":
            return [str(v) for v in (value if isinstance(value, list) else [value])]
        return str(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"setting {f.name}: {e}") from e
