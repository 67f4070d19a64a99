"""The Spark Connect protocol without the Spark Connect client: a lean `rowgate serve`.

rowgate needs only pyspark's generated protocol modules (`pyspark.sql.connect.proto`, which
import protobuf, grpc and each other). Importing them the ordinary way runs the `__init__`
of `pyspark`, `pyspark.sql` and `pyspark.sql.connect` first, and those load the whole
client: pandas, py4j, pyspark's test utilities. That was about 60 MiB of the proxy's
resident memory and half a second of its start, for code the proxy never calls.

`load_protocol_only()` registers the three parent packages as plain namespace-like modules
(their `__path__` only, their `__init__` not run), so `from pyspark.sql.connect.proto import
base_pb2` loads the protocol modules and nothing else. It is meant for the `rowgate serve`
process, called before anything imports pyspark: once the parents are registered this way,
`import pyspark.sql` no longer gives the client (`SparkSession` and the rest are missing),
so a process that also runs a pyspark client (tests, notebooks) must not call it. It does
nothing when pyspark was imported already, or when pyspark is not installed (the import
that follows then fails with the usual message).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

PARENTS = ("pyspark", "pyspark.sql", "pyspark.sql.connect")


def load_protocol_only() -> bool:
    """Registers pyspark's parent packages without running them; True if it did.

    >>> import sys
    >>> "pyspark" in sys.modules or load_protocol_only() is False  # doctest runs beside pyspark
    True
    """
    if any(name in sys.modules for name in PARENTS):
        return False
    spec = importlib.util.find_spec("pyspark")  # locates the package without running it
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent
    for name in PARENTS:
        path = root.joinpath(*name.split(".")[1:])
        module = types.ModuleType(name, f"{name}, without its __init__ (rowgate/spark_protocol.py)")
        module_spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module_spec.submodule_search_locations = [str(path)]
        module.__spec__, module.__path__, module.__package__ = module_spec, [str(path)], name
        module.__file__ = str(path / "__init__.py")  # where the package lives (spark_home())
        sys.modules[name] = module
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)
    return True
