import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { fetchRuns, IRun } from './api';

/**
 * A list of the runs in the store, newest first, refreshed while visible.
 *
 * Run names are user text: everything is written with `textContent`, never as HTML.
 */
export class RunsView extends Widget {
  constructor(options: RunsView.IOptions = {}) {
    super();
    this.addClass('jp-DaskObserve-runs');
    const heading = document.createElement('h3');
    heading.textContent = 'Runs';
    this._status = document.createElement('div');
    this._status.className = 'jp-DaskObserve-runs-status';
    this._table = document.createElement('table');
    this._table.className = 'jp-DaskObserve-runs-table';
    this.node.append(heading, this._status, this._table);

    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: {
        interval: options.refreshInterval ?? 5000,
        backoff: true,
        max: 60 * 1000
      },
      name: 'dask-observe:runs',
      standby: 'when-hidden'
    });
  }

  /**
   * Fetch the runs now and redraw the list.
   */
  async refresh(): Promise<void> {
    try {
      this._render(await fetchRuns());
    } catch (reason) {
      this._status.textContent = `Cannot list runs: ${String(reason)}`;
      throw reason;
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  private _render(runs: IRun[]): void {
    this._status.textContent =
      runs.length === 0
        ? 'No runs recorded yet. Record one with %%dask_record in a notebook, or run "dask-observe demo".'
        : `${runs.length} run${runs.length === 1 ? '' : 's'}`;
    const head = document.createElement('tr');
    for (const label of ['#', 'Name', 'Status', 'Started', 'Time', 'Tasks']) {
      const th = document.createElement('th');
      th.textContent = label;
      head.append(th);
    }
    const rows = runs.map(run => {
      const tr = document.createElement('tr');
      tr.className = `jp-DaskObserve-run jp-DaskObserve-run-${run.status}`;
      tr.dataset.runId = String(run.id);
      const cells = [
        String(run.id),
        run.name,
        run.status,
        new Date(run.started * 1000).toLocaleString(),
        run.duration_s === null ? '' : `${run.duration_s.toFixed(1)} s`,
        run.n_failed > 0
          ? `${run.n_tasks} (${run.n_failed} failed)`
          : String(run.n_tasks)
      ];
      for (const text of cells) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    });
    this._table.replaceChildren(head, ...rows);
  }

  private _poll: Poll;
  private _status: HTMLDivElement;
  private _table: HTMLTableElement;
}

/**
 * The namespace for `RunsView` statics.
 */
export namespace RunsView {
  /**
   * Options to create a runs view.
   */
  export interface IOptions {
    /**
     * Milliseconds between refreshes while the panel is visible.
     */
    refreshInterval?: number;
  }
}
