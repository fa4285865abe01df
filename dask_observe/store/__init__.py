"""The durable store that every part of dask-observe reads and the recorder writes."""

from dask_observe.store.connection import (
    QueryTooLong,
    RunNotFound,
    StoreError,
    StoreMissing,
)
from dask_observe.store.rundata import RunData
from dask_observe.store.store import BaseStore

__all__ = [
    "BaseStore",
    "QueryTooLong",
    "RunData",
    "RunNotFound",
    "StoreError",
    "StoreMissing",
]
