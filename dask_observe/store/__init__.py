"""The durable store that every part of dask-observe reads and the recorder writes."""

from dask_observe.store.run import Run
from dask_observe.store.store import RunNotFound, Store, StoreError

__all__ = ["Run", "RunNotFound", "Store", "StoreError"]
