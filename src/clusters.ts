import { Widget } from '@lumino/widgets';

import { ICluster } from './api';
import { heading } from './dom';
import { ClusterModel } from './models';
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
    const head = heading('Clusters');
    this._list = document.createElement('ul');
    this._list.className = 'jp-DaskObserve-clusterList';
    this.node.append(head, this._list);
    options.model.changed.connect(
      (_, clusters) => this._render(clusters),
      this
    );
    this._render(options.model.items);
  }

  private _render(clusters: readonly ICluster[]): void {
    this._list.replaceChildren(...clusters.map(c => this._card(c)));
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
  private _openPage: (clusterId: string, page: string) => void;
}

/**
 * The namespace for `ClustersView` statics.
 */
export namespace ClustersView {
  export interface IOptions {
    /**
     * The clusters to show (the panel's, polled while it shows).
     */
    model: ClusterModel;
    /**
     * Open a dashboard page of a cluster in the main area.
     */
    openPage: (clusterId: string, page: string) => void;
  }
}
