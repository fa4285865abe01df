import type { ICluster } from '../../data/api';
import { fetchClusters } from '../../data/api';
import { PolledList } from '../../data/polledlist';

/**
 * The clusters that recorders watch, most recently seen first.
 */
export class ClusterModel extends PolledList<ICluster> {
  constructor(options: Partial<PolledList.IOptions<ICluster>> = {}) {
    super({
      fetch: fetchClusters,
      name: 'dask-observe:clusters',
      // Not last_seen, which a live cluster renews on every refresh: its
      // card (and the dashboard buttons under the pointer) would be redrawn.
      signature: clusters =>
        JSON.stringify(
          clusters.map(c => [
            c.id,
            c.address,
            c.dashboard,
            c.alive,
            c.silent_since,
            c.notebooks
          ])
        ),
      ...options
    });
  }
}
