"""The protected world a test module runs in: tables, rows, views and row access policies
declared as data, created through a proxy by its admin, and dropped after the module.

Every integration module needs the same start: an admin session on the proxy, tables with a
few rows, policies over them, callers to ask questions as. Written out by hand in each module,
the set-up drifted (one drops its database, one does not; one collects the policy statement,
one does not) and hid what the module is about behind its plumbing. Declared as data, a
module's world reads as what it is: which tables, which rows, who may see what.

Names are unique per module (`unique`): the modules share one Spark server, and a table or
database left by one must never be the one another finds. Statements run in the order they are
declared, since some of them mean something only after another (a view made after the policy
on its table is a different statement for the proxy than one made before it).

The texts that name tables (a policy's predicate, a view's query, `select`, `Sql`) are
`str.format` templates: `{db}` is the world's database, a declared table's name (`{acl}`) is
that table's real name, and a key of `databases` is that database's real name; literal braces
are written doubled. Rows are data and are taken as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN

ALL_AUTHENTICATED = "allAuthenticatedUsers"

Session = Any  # a pyspark Connect SparkSession; the harness does not import pyspark eagerly


@dataclass(frozen=True)
class Table:
    """One table. `rows` are INSERT sources, one INSERT (and so at least one file) each:
    `values(...)` or a query. With `select`, the table is made by CREATE TABLE ... AS instead.
    `database` is a key of the world's `databases`; empty: the world's own database."""

    name: str
    columns: str = ""
    rows: Sequence[str] = ()
    partitioned_by: str = ""
    select: str = ""
    database: str = ""


@dataclass(frozen=True)
class View:
    name: str
    query: str


@dataclass(frozen=True)
class Policy:
    """CREATE ROW ACCESS POLICY `name` ON `table` (a declared table, or a name template)
    GRANT TO `grantees` FILTER USING (`predicate`); `grantees=None` leaves GRANT TO out."""

    name: str
    table: str
    predicate: str
    grantees: Sequence[str] | None = (ALL_AUTHENTICATED,)


@dataclass(frozen=True)
class Sql:
    """A statement of its own, run by the admin where it stands (USE, an odd DDL)."""

    text: str


Declaration = Table | View | Policy | Sql


def literal(value: object) -> str:
    """A Python value as a Spark SQL literal (the few kinds test rows hold)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if "'" in value or "\\" in value:
            raise ValueError(f"write a row holding {value!r} as SQL text: its quoting is the test's business")
        return f"'{value}'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def values(rows: Iterable[Sequence[object]]) -> str:
    """`VALUES (1, 'eu'), (2, 'us')` from Python tuples: one INSERT source of a `Table`."""
    return "VALUES " + ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)


@dataclass
class World:
    """What a module's tests get: real names, the admin, callers, and the clean-up."""

    proxy: Any  # tests.harness.processes.RowgateProcess (or anything with a `url`)
    admin: Session
    make: Callable[[str], Session]  # opens a session on a URL (module_sessions)
    spark_url: str = ""  # the Spark server itself, for `direct` and the clean-up
    names: dict[str, str] = field(default_factory=dict)  # template key -> real name
    databases: list[str] = field(default_factory=list)  # real names, dropped at close()
    flat_tables: list[str] = field(default_factory=list)  # real names outside any database
    flat_views: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)  # real names of tables with policies
    forget_policies: bool = False
    _direct: Session | None = None
    _callers: dict = field(default_factory=dict)

    @property
    def db(self) -> str:
        return self.names["db"]

    def table(self, name: str) -> str:
        """A declared table's real name."""
        return self.names[name]

    def text(self, template: str) -> str:
        return template.format_map(self.names)

    @property
    def direct(self) -> Session:
        """A session on the Spark server itself, past the proxy (made on first use)."""
        if self._direct is None:
            self._direct = self.make(self.spark_url)
        return self._direct

    def caller(self, user: str, groups: str | None = None, proxy: Any = None) -> Session:
        """One session per caller (and proxy) for the whole module."""
        proxy = proxy or self.proxy
        key = (user, groups, proxy.url)
        if key not in self._callers:
            self._callers[key] = self.make(remote_url(proxy.url, user=user, groups=groups))
        return self._callers[key]

    def run(self, *declarations: Declaration) -> None:
        """Creates what is declared, in order, as the admin."""
        for declaration in declarations:
            for statement in self._statements(declaration):
                self.admin.sql(statement).collect()

    def _statements(self, d: Declaration) -> list[str]:
        if isinstance(d, Sql):
            return [self.text(d.text)]
        if isinstance(d, View):
            return [f"CREATE VIEW {self._name(d.name, view=True)} AS {self.text(d.query)}"]
        if isinstance(d, Policy):
            table = self._name(d.table, new=False)
            if table not in self.protected:
                self.protected.append(table)
            grant = "" if d.grantees is None else "GRANT TO (" + ", ".join(f"'{g}'" for g in d.grantees) + ") "
            return [f"CREATE ROW ACCESS POLICY {d.name} ON {table} {grant}FILTER USING ({self.text(d.predicate)})"]
        name = self._name(d.name, d.database)
        if d.select:
            return [f"CREATE TABLE {name} USING parquet AS {self.text(d.select)}"]
        partitioned = f" PARTITIONED BY ({d.partitioned_by})" if d.partitioned_by else ""
        made = f"CREATE TABLE {name} ({d.columns}) USING parquet{partitioned}"
        return [made, *(f"INSERT INTO {name} {rows}" for rows in d.rows)]

    def _name(self, name: str, database: str = "", new: bool = True, view: bool = False) -> str:
        """The real name of a declared table or view; a new one is named here, once."""
        if database:
            return f"{self.names[database]}.{name}"
        if name in self.names:
            return self.names[name]
        if "{" in name or "." in name:
            return self.text(name)
        if not new:
            raise KeyError(f"{name!r} is not a table of this world: declare it before its policy")
        if "db" in self.names:
            real = f"{self.db}.{name}"
        else:
            real = unique(name)
            (self.flat_views if view else self.flat_tables).append(real)
        self.names[name] = real
        return real

    def close(self) -> None:
        """Drops what the world made: its policies first when asked (a proxy that outlives
        the module, shared with modules that expect no policies), then its databases and
        tables past the proxy, which works even when a test stopped the proxy."""
        if self.forget_policies:
            for table in self.protected:
                try:
                    self.admin.sql(f"DROP ALL ROW ACCESS POLICIES ON {table}").collect()
                except Exception:
                    pass
        if not self.spark_url:
            return
        for db in self.databases:
            self.direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
        for view in self.flat_views:
            self.direct.sql(f"DROP VIEW IF EXISTS {view}")
        for table in self.flat_tables:
            self.direct.sql(f"DROP TABLE IF EXISTS {table}")


def protected_world(
    proxy: Any,
    make: Callable[[str], Session],
    *declarations: Declaration,
    database: str = "",
    databases: dict[str, str] | None = None,
    spark_url: str = "",
    admin: str = ADMIN,
    forget_policies: bool = False,
    unique_name: Callable[[str], str] = unique,
) -> World:
    """A world on `proxy`: `database` (a prefix) made unique and created, `databases` (key ->
    prefix) likewise, then `declarations` created in order by `admin`. Without `database`,
    each table gets a unique name of its own in the current database.

    `spark_url` (the Spark server's) lets `close()` drop what was made, past the proxy;
    `unique_name` makes a database's name from its prefix (a module whose numbers must not
    meet a digit in the name brings its own)."""
    world = World(
        proxy=proxy,
        admin=make(remote_url(proxy.url, user=admin)),
        make=make,
        spark_url=spark_url,
        forget_policies=forget_policies,
    )
    wanted = ({"db": database} if database else {}) | dict(databases or {})
    for key, prefix in wanted.items():
        world.names[key] = unique_name(prefix)
        world.databases.append(world.names[key])
        world.run(Sql(f"CREATE DATABASE {world.names[key]}"))
    world.run(*declarations)
    return world
