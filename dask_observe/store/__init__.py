"""The durable store that every part of dask-observe reads and the recorder writes."""

from dask_observe.store.run import RunData
from dask_observe.store.store import (
    QueryTooLong,
    RunNotFound,
    Store,
    StoreError,
    StoreMissing,
)

__all__ = [
    "QueryTooLong",
    "RunData",
    "RunNotFound",
    "Store",
    "StoreError",
    "StoreMissing",
]
