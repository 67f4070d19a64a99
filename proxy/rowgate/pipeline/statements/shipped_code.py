"""Code a caller ships or names, which would run on the cluster with Spark's own rights.

A Python UDF, a jar, a `TRANSFORM` script or a `reflect` call executes on executors that
can open every table's files, so none of them is bound by a row filter. While any table is
protected they are refused for non-admins unless the operator allows that kind explicitly
(`--allow-python-udfs`, `--allow-artifacts`, `--allow-java-udfs`,
`--allow-script-transform`, `--allow-reflect`): a trade of convenience for a hole the
operator chooses to accept, e.g. for callers who are trusted not to read files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf.message import Message

from rowgate.config import ServeConfig
from rowgate.message_walk import messages
from rowgate.pipeline.core import Refusal

FLAGS = {
    "python_udf": ("Python UDFs, UDTFs and data sources", "--allow-python-udfs"),
    "python_files": ("shipping Python files and archives", "--allow-python-udfs"),
    "artifacts": ("uploading jars and classes", "--allow-artifacts"),
    "java_udf": ("registering Java/Scala UDFs", "--allow-java-udfs"),
    "transform": ("TRANSFORM ... USING scripts", "--allow-script-transform"),
    "reflect": ("reflect()/java_method()", "--allow-reflect"),
}
# Artifact name prefixes pyspark uses (AddArtifacts); `cache/` carries local data, not code.
ARTIFACT_KINDS = {
    "jars/": "artifacts",
    "classes/": "artifacts",
    "pyfiles/": "python_files",
    "archives/": "python_files",
    "files/": "python_files",
}


@dataclass(frozen=True)
class CodeRules:
    allowed: frozenset[str]

    @classmethod
    def from_config(cls, config: ServeConfig) -> CodeRules:
        allowed: set[str] = set()
        if config.allow_python_udfs:
            allowed |= {"python_udf", "python_files"}
        if config.allow_artifacts:
            allowed.add("artifacts")
        if config.allow_java_udfs:
            allowed.add("java_udf")
        if config.allow_script_transform:
            allowed.add("transform")
        if config.allow_reflect:
            allowed.add("reflect")
        return cls(frozenset(allowed))

    def check(self, kinds: Iterable[str]) -> None:
        for kind in kinds:
            if kind not in self.allowed:
                what, flag = FLAGS.get(kind, (kind, "an operator setting"))
                raise Refusal.denied(
                    f"{what} are refused for non-admins while row access policies are in force: the code would run "
                    f"with Spark's own rights and could read protected tables' files (operator setting {flag})",
                    reason=f"user_code_{kind}",
                )


def artifact_kind(name: str) -> str | None:
    if name.startswith("cache/"):
        return None
    for prefix, kind in ARTIFACT_KINDS.items():
        if name.startswith(prefix):
            return kind
    return "artifacts"  # an unknown kind of artifact is treated as code


# Any mention counts: backticks, comments or odd spacing between the name and its "(" are
# all still a call to Spark's parser, and a false alarm is only a clear refusal.
_REFLECTION_TEXT = re.compile(r"(?<![A-Za-z0-9_])(?:try_reflect|reflect|java_method)(?![A-Za-z0-9_])", re.IGNORECASE)
# A TRANSFORM script is `TRANSFORM(<columns>) USING '<script>'`: USING right after a closing
# parenthesis, unlike the higher-order function transform(array, x -> ...).
_TRANSFORM_TEXT = re.compile(r"(?<![A-Za-z0-9_])transform\s*\([\s\S]*?\)\s*using(?![A-Za-z0-9_])", re.IGNORECASE)


def code_in_expressions(message: Message) -> set[str]:
    """Reflection and TRANSFORM scripts hidden in a DataFrame plan's expressions
    (`F.reflect(...)`, `selectExpr("java_method(...)")`, a TRANSFORM in a subquery string).

    Expression strings are matched as text, on purpose: a false alarm costs a clear
    refusal, a miss would run the caller's code with Spark's rights."""
    found: set[str] = set()
    for msg in messages([message], into_maps=True):
        name = msg.DESCRIPTOR.name
        if name in ("UnresolvedFunction", "CallFunction") and _REFLECTION_TEXT.search(msg.function_name):
            found.add("reflect")
        elif name == "ExpressionString":
            if _REFLECTION_TEXT.search(msg.expression):
                found.add("reflect")
            if _TRANSFORM_TEXT.search(msg.expression):
                found.add("transform")
    return found
