import { Widget } from '@lumino/widgets';

import type { ICluster } from '../../data/api';
import { button, element, heading, patchList } from '../../ui/dom';
import { clockTime, dateTime } from '../../ui/format';
import type { ClusterModel } from './model';
import { DASHBOARD_PAGES } from '../../panel/tabs';

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
    this._status = element('div', 'jp-DaskObserve-clusters-status');
    this._list = element('ul', 'jp-DaskObserve-clusterList');
    this.node.append(head, this._status, this._list);
    options.model.changed.connect(
      (_, clusters) => this._render(clusters),
      this
    );
    options.model.failed.connect((_, reason) => {
      this._status.textContent = `Cannot list the clusters: ${String(reason)}`;
    }, this);
    this._render(options.model.items, options.model.items.length === 0);
  }

  /**
   * Draw the clusters; with none, the lines that make one. `unknown`: not
   * fetched yet.
   */
  private _render(clusters: readonly ICluster[], unknown = false): void {
    this._status.textContent = unknown
      ? 'Looking for clusters…'
      : clusters.length === 0
        ? 'No cluster yet: in a notebook, "%load_ext dask_observe" then ' +
          '"client = Client()" lists one here.'
        : '';
    this._status.hidden = this._status.textContent === '';
    patchList(
      this._list,
      clusters.map(c => this._card(c)),
      'data-cluster-id'
    );
  }

  private _card(cluster: ICluster): HTMLLIElement {
    const item = element('li', 'jp-DaskObserve-cluster');
    item.dataset.clusterId = cluster.id;
    item.classList.toggle('jp-mod-gone', !cluster.alive);
    const silent = cluster.alive && cluster.silent_since !== null;
    item.classList.toggle('jp-mod-silent', silent);
    const seen = element(
      'div',
      'jp-DaskObserve-cluster-seen',
      cluster.alive
        ? silent
          ? `not answering since ${clockTime(cluster.silent_since!)}`
          : 'live'
        : `last seen ${dateTime(cluster.last_seen)}`
    );
    if (silent) {
      seen.title =
        'Its connection holds, but the scheduler has not answered the ' +
        "recorder's calls for a while (observe.recorder.silent-after): its process may " +
        'be stopped or its event loop held (a task or plugin holding the GIL). ' +
        `Last answer: ${dateTime(cluster.silent_since!)}.`;
    }
    item.append(
      element('div', 'jp-DaskObserve-cluster-address', cluster.address),
      seen
    );
    if (cluster.notebooks.length) {
      // By notebook: several kernels (and scripts) may share one cluster.
      const by = element(
        'div',
        'jp-DaskObserve-cluster-by',
        `${cluster.alive ? 'in' : 'was in'} ${cluster.notebooks
          .map(n => n.split('/').pop())
          .join(', ')}`
      );
      by.title = cluster.notebooks.join('\n');
      item.append(by);
    }
    if (cluster.dashboard) {
      const pages = element('div', 'jp-DaskObserve-cluster-pages');
      for (const page of DASHBOARD_PAGES) {
        const open = button('jp-DaskObserve-dashboard-button', page, () =>
          this._openPage(cluster.id, page)
        );
        open.dataset.page = page;
        open.disabled = !cluster.alive;
        pages.append(open);
      }
      item.append(pages);
    }
    return item;
  }

  private _list: HTMLUListElement;
  private _status: HTMLDivElement;
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
