"""Who may do what: the one object the request path asks, in the spirit of Trino's `AccessControl`.

The proxy asks four questions of a caller: are they an admin, which rows of a protected
table do they see, may they use a kind of request, may they change a setting. The answers
are data kept in policy/ (the admin members the operator configured, the policy snapshot,
kinds.py, settings_allow_list.py); this object answers all four from that data. It is
built once (proxy/rowgate/pipeline/assembly.py) and handed to every step that decides, so
no step keeps its own idea of who the admins are and a new kind of decision has one home.

The rewriters (proxy/rowgate/rewrite/) are not handed this object: they receive plain data
through their context (the caller, whether they are an admin, the snapshot's policies of a
table) and call proxy/rowgate/policy/decision.py themselves, so they stay testable without
the request path. The row-filter questions here are those same functions, so the pipeline
and the rewriters cannot disagree about a filter.

>>> from rowgate.identity.caller import Caller
>>> access = AccessControl.of(["user:root@example.com"])
>>> access.is_admin(Caller("user:root@example.com")), access.is_admin(Caller("user:ann@example.com"))
(True, False)
>>> access.setting_refusal("spark.sql.ansi.enabled") is None
True
>>> access.kind_refusal("relation:extension", admin=False) is not None
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from rowgate.identity.caller import Caller
from rowgate.identity.members import Member, is_admin, validate_admin_member
from rowgate.policy import decision, kinds, settings_allow_list

if TYPE_CHECKING:
    from sqlglot import exp

    from rowgate.policy.model import RowAccessPolicy


class AccessControl:
    """Answers who may do what; holds no state besides the configured admins."""

    def __init__(self, admins: Iterable[Member] = (), *, decide_admin: Callable[[Caller], bool] | None = None):
        self.admins: tuple[Member, ...] = tuple(admins)
        # A test (or an embedding) may decide adminship itself; the operator's list otherwise.
        self._decide_admin = decide_admin

    @classmethod
    def of(cls, members: Iterable[str]) -> AccessControl:
        """From the operator's `--admin` members, each validated (public members are refused)."""
        return cls([validate_admin_member(member) for member in members])

    @classmethod
    def deciding(cls, decide_admin: Callable[[Caller], bool]) -> AccessControl:
        """Adminship decided by `decide_admin` (tests: ``AccessControl.deciding(lambda caller: True)``)."""
        return cls(decide_admin=decide_admin)

    # -- who is an admin -------------------------------------------------------------------

    def is_admin(self, caller: Caller) -> bool:
        """Whether an admin member covers the caller; anonymous callers never are."""
        if self._decide_admin is not None:
            return self._decide_admin(caller)
        return is_admin(caller, self.admins)

    # -- rows: the same functions the rewriters call (policy/decision.py) --------------------

    @staticmethod
    def row_filter(caller: Caller, policies: Sequence[RowAccessPolicy]) -> exp.Expression | None:
        """The predicate a read of a table with `policies` is filtered by for `caller`
        (FALSE without a grant); None when the table is unprotected."""
        return decision.row_filter(caller, policies)

    @staticmethod
    def has_full_access(caller: Caller, policies: Sequence[RowAccessPolicy]) -> bool:
        """Nothing of the table is withheld from the caller (writes and time travel need it)."""
        return decision.has_full_access(caller, policies)

    @staticmethod
    def applied_policies(caller: Caller, policies: Sequence[RowAccessPolicy]) -> tuple[str, ...]:
        """The policies whose filters are OR-ed for the caller, in filter order."""
        return decision.applied_policies(caller, policies)

    # -- kinds of request and settings --------------------------------------------------------

    @staticmethod
    def kind_refusal(kind: str, *, admin: bool) -> str | None:
        """Why the caller may not use `kind` while a table is protected; None when allowed
        (proxy/rowgate/policy/kinds.py). Admins are refused only kinds nobody can analyse."""
        return kinds.refused_for_admins(kind) if admin else kinds.refusal_of(kind)

    @staticmethod
    def setting_refusal(key: str) -> str | None:
        """Why a non-admin may not change setting `key`; None when it is on the allow list
        (proxy/rowgate/policy/settings_allow_list.py). Admins may change any setting but the
        proxy's own (pipeline/statements/guard_config.py)."""
        if settings_allow_list.allowed(key) is not None:
            return None
        return settings_allow_list.refusal_reason(key)

    def unlisted_settings(self, keys: Iterable[str]) -> list[str]:
        """The keys a non-admin may not change, sorted and without repeats."""
        return sorted({k for k in keys if self.setting_refusal(k) is not None})
