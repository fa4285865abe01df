"""Recording a run from the client: the capture's plugins shipped to the
cluster (:mod:`.plugins`, or what distributed keeps where they cannot run:
:mod:`.fallback`), the recorder that copies its telemetry into the store
(:mod:`.recorder`), a run's span (:mod:`.span`), its start and end
(:mod:`.lifecycle`, with :mod:`.measures`, :mod:`.environment` and
:mod:`.finish`), and ``dask_observe.record()`` (:mod:`.block`).

(Not named ``record``: that is the public function ``dask_observe.record``,
which a subpackage of the same name would hide once imported.)"""

import dask.config  # noqa: F401  (the recorder needs dask: loaded here first)

from dask_observe import config

# dask's config gets the shipped defaults now, for whoever reads
# ``observe.*`` from dask itself.
config.register_defaults()
