import time
from datetime import UTC, datetime

from rowgate.policy.model import RowAccessPolicy, TableName

T = TableName("spark_catalog", "sales", "orders")
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def policy(name: str, filter_sql: str, *grantees: str, table: TableName = T) -> RowAccessPolicy:
    return RowAccessPolicy(
        table=table,
        name=name,
        grantees=grantees or ("allAuthenticatedUsers",),
        filter_sql=filter_sql,
        created_at=EPOCH,
        updated_at=EPOCH,
    )


def wait_for(condition, timeout: float = 1.0) -> bool:
    """Polls `condition` until it holds or `timeout` passes; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
