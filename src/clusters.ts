import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { fetchClusters, ICluster } from './api';
import { DASHBOARD_PAGES } from './tabs';

/**
 * The clusters that recorders watch, each with buttons for its dashboard's main
 * pages; a cluster no recorder reports any more is greyed as "last seen".
 */
export class ClustersView extends Widget {
  constructor(options: ClustersView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-clusters');
    this._openPage = options.openPage;
    this._onClusters = options.onClusters ?? null;
    const heading = document.createElement('h3');
    heading.textContent = 'Clusters';
    this._list = document.createElement('ul');
    this._list.className = 'jp-DaskObserve-clusterList';
    this.node.append(heading, this._list);
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: options.refreshInterval ?? 5000, backoff: true },
      name: 'dask-observe:clusters',
      standby: 'when-hidden'
    });
  }

  /**
   * Milliseconds between refreshes while the panel is visible.
   */
  get refreshInterval(): number {
    return this._poll.frequency.interval;
  }

  set refreshInterval(ms: number) {
    this._poll.frequency = { ...this._poll.frequency, interval: ms };
  }

  /**
   * Fetch the clusters now and redraw them when they changed.
   */
  async refresh(): Promise<void> {
    const clusters = await fetchClusters();
    this._onClusters?.(clusters);
    const signature = JSON.stringify(
      clusters.map(c => [c.id, c.dashboard, c.alive])
    );
    if (signature === this._shown) {
      return;
    }
    this._shown = signature;
    this._list.replaceChildren(...clusters.map(c => this._card(c)));
  }

  dispose(): void {
    if (!this.isDisposed) {
      this._poll.dispose();
    }
    super.dispose();
  }

  private _card(cluster: ICluster): HTMLLIElement {
    const item = document.createElement('li');
    item.className = 'jp-DaskObserve-cluster';
    item.dataset.clusterId = cluster.id;
    item.classList.toggle('jp-mod-gone', !cluster.alive);
    const address = document.createElement('div');
    address.className = 'jp-DaskObserve-cluster-address';
    address.textContent = cluster.address;
    const seen = document.createElement('div');
    seen.className = 'jp-DaskObserve-cluster-seen';
    seen.textContent = cluster.alive
      ? 'live'
      : `last seen ${new Date(cluster.last_seen * 1000).toLocaleString()}`;
    item.append(address, seen);
    if (cluster.dashboard) {
      const pages = document.createElement('div');
      pages.className = 'jp-DaskObserve-cluster-pages';
      for (const page of DASHBOARD_PAGES) {
        const button = document.createElement('button');
        button.className = 'jp-DaskObserve-dashboard-button';
        button.textContent = page;
        button.dataset.page = page;
        button.disabled = !cluster.alive;
        button.addEventListener('click', () =>
          this._openPage(cluster.id, page)
        );
        pages.append(button);
      }
      item.append(pages);
    }
    return item;
  }

  private _list: HTMLUListElement;
  private _onClusters: ((clusters: ICluster[]) => void) | null;
  private _openPage: (clusterId: string, page: string) => void;
  private _poll: Poll;
  private _shown = '';
}

/**
 * The namespace for `ClustersView` statics.
 */
export namespace ClustersView {
  export interface IOptions {
    /**
     * Open a dashboard page of a cluster in the main area.
     */
    openPage: (clusterId: string, page: string) => void;
    /**
     * Told the clusters on every refresh.
     */
    onClusters?: (clusters: ICluster[]) => void;
    /**
     * Milliseconds between refreshes while the panel is visible.
     */
    refreshInterval?: number;
  }
}
