"""Catalog API calls (`spark.catalog.*`) are reported with the names they carry.

None of them returns table rows, but several change what later plans mean
(`setCurrentDatabase`, `setCurrentCatalog`) or create tables over a location
(`createTable(path=...)`): the pipeline updates the session state and judges locations.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql.connect.proto import relations_pb2

from rowgate.rewrite.plan.classify import ADMIN, CATALOG_OPS, named_locations
from rowgate.rewrite.plan.result import CatalogOp
from rowgate.rewrite.plan.walker import Frame, Walk


def catalog(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    op = rel.catalog.WhichOneof("cat_type")
    if op is None:
        return frame
    walk.found.constructs.add(f"catalog:{op}")
    if op not in CATALOG_OPS:
        walk.restricted(f"the catalog operation {op}", frame, unknown=True)
        return frame
    body = getattr(rel.catalog, op)
    names = tuple(
        (field.name, value)
        for field, value in body.ListFields()
        if field.type == FieldDescriptor.TYPE_STRING and not field.is_repeated
    )
    walk.found.catalog_ops.append(CatalogOp(op, names))
    if CATALOG_OPS[op] == ADMIN:
        walk.restricted(f"the catalog operation {op}", frame)
    # createTable(path=...), refreshByPath(...): the fields policy/kinds.py names as locations
    walk.found.locations.extend(named_locations(f"catalog:{op}", rel.catalog))
    return frame
