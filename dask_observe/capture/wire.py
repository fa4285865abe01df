"""What the scheduler plugin and the recorder agree on.

The recorder may be another dask-observe than the one whose plugin runs on the
cluster (another kernel registered it first, or the cluster has another version
installed): every reply says which version of this agreement it speaks, and a
recorder that cannot read it says so rather than misread it.

Version 1: ``dask_observe_pull`` returns ``{"wire", "instance", "last",
"dropped", "records"}``, records being ``(number, record)`` pairs whose first
item names the kind:

- ``("log", time, level, source, worker, logger, message)``
- ``("task", time, key, prefix, span_ids, worker, thread, start, stop, status,
  nbytes, compute_s, transfer_s, disk_read_s, disk_write_s, deserialize_s,
  exception, traceback)``
- ``("metrics", time, worker or None, {name: value})``
- ``("event", time, kind, worker or None, data)``

``dask_observe_hello`` returns ``{"wire", "package", "dashboard"}``;
``dask_observe_sample`` takes a metrics sample now.

Version 2 adds the two calls a run makes, one round trip each:
``dask_observe_begin(span_id)`` watches the span and returns the cluster's
fine metrics totals (``dask_observe_fine_metrics`` rows); ``dask_observe_end
(span_id)`` unwatches it, has every worker (with a heartbeat) and nanny ship
what it holds (their ``dask_observe_flush`` handler), and returns ``{"counts",
"fine", "span_fine", "workers"}``: the span's task counts, the cluster's and
the span's fine metrics after the flush, and the workers' addresses. Workers and
nannies call ``dask_observe_push(source, records, dropped, samples, events)``:
log records ``(time, level, logger, message, worker)``, memory samples
``(time, worker, rss)`` and events ``(time, kind, worker, data)``; they come from
the same shipped bundle as the scheduler's plugin, so they always agree with it.
"""

VERSION = 2

#: The worker and nanny handler that ships what it holds now; with
#: ``heartbeat`` (a worker) it then sends a heartbeat.
FLUSH_HANDLER = "dask_observe_flush"
