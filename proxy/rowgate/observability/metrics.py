"""Prometheus metrics, on their own port so scraping never competes with Spark traffic."""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("rowgate_requests_total", "Requests by RPC and final status", ["rpc", "code"], registry=REGISTRY)
REFUSED = Counter("rowgate_requests_refused_total", "Requests the proxy refused, by reason", ["reason"], registry=REGISTRY)
FILTERED = Counter("rowgate_requests_filtered_total", "Requests whose reads were row-filtered", registry=REGISTRY)
UPSTREAM_ERRORS = Counter(
    "rowgate_upstream_errors_total", "Errors returned by the upstream, by status", ["code"], registry=REGISTRY
)
CATALOG_QUERIES = Counter(
    "rowgate_catalog_queries_total",
    "Statements the proxy itself sent upstream to learn what names mean (cache misses, session positions)",
    registry=REGISTRY,
)
CATALOG_WAITS = Counter(
    "rowgate_catalog_waits_total",
    "Requests that waited for an upstream catalog answer (cache misses on the hot path; background refreshes not counted)",
    registry=REGISTRY,
)
# Fine below 10 ms, where the rewrite targets (p50 <= 5 ms, p99 <= 40 ms) are read.
REWRITE_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.1, 0.25, 1.0)
REWRITE_SECONDS = Histogram(
    "rowgate_rewrite_seconds",
    "Time spent inspecting and rewriting one request (pipeline, before forwarding), by RPC",
    ["rpc"],
    buckets=REWRITE_BUCKETS,
    registry=REGISTRY,
)
SQL_REWRITE_SECONDS = Histogram(
    "rowgate_sql_rewrite_seconds",
    "Time to rewrite one SQL text that was not remembered (parse, resolve, wrap, render)",
    buckets=REWRITE_BUCKETS,
    registry=REGISTRY,
)
REWRITE_MEMO = Counter(
    "rowgate_rewrite_memo_total",
    "SQL texts answered from remembered rewrites (hit) or rewritten (miss)",
    ["outcome"],
    registry=REGISTRY,
)


def observe_sql_rewrite(hit: bool, seconds: float) -> None:
    if hit:
        REWRITE_MEMO.labels("hit").inc()
    else:
        REWRITE_MEMO.labels("miss").inc()
        SQL_REWRITE_SECONDS.observe(seconds)


SECOND_OPINION = Counter(
    "rowgate_second_opinion_total",
    "Plans checked by Spark's analyzer (miss), by a remembered verdict of the same plan (hit) or of its shape (shape_hit)",
    ["outcome"],
    registry=REGISTRY,
)
SECOND_OPINION_SECONDS = Histogram(
    "rowgate_second_opinion_seconds",
    "Time to have Spark analyse one plan that was not remembered",
    buckets=REWRITE_BUCKETS,
    registry=REGISTRY,
)


def observe_second_opinion(hit: bool, seconds: float, shape: bool = False) -> None:
    if hit:
        SECOND_OPINION.labels("shape_hit" if shape else "hit").inc()
    else:
        SECOND_OPINION.labels("miss").inc()
        SECOND_OPINION_SECONDS.observe(seconds)


STATE_READS = Counter(
    "rowgate_state_reads_total",
    "Config calls that read a state version record (pipeline/session/epoch.py): the shared record"
    " (one per plan request) and the caller's session record (only when another replica may have changed it)",
    ["record"],
    registry=REGISTRY,
)


def observe_state_read(record: str) -> None:
    STATE_READS.labels(record).inc()


CHECKS_RUNNING = Gauge(
    "rowgate_checks_running", "Checks (rewrite, second opinion) under way in callers' lanes", registry=REGISTRY
)
CHECKS_WAITING = Gauge("rowgate_checks_waiting", "Checks waiting behind their own caller's earlier ones", registry=REGISTRY)


class LaneFigures(Protocol):
    """What the metrics read of the callers' lanes (pipeline/enforce/caller_lanes.py); a
    Protocol, because observability sits below the pipeline and may not import it."""

    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...


def track_lanes(lanes: LaneFigures) -> None:
    """Export the lanes' figures (pipeline/enforce/caller_lanes.py), read when metrics are scraped."""
    CHECKS_RUNNING.set_function(lambda: lanes.running)
    CHECKS_WAITING.set_function(lambda: lanes.waiting)


def serve_metrics(listen: str) -> None:
    host, _, port = listen.rpartition(":")
    start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0", registry=REGISTRY)
