import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { fetchRuns, IRun } from './api';

/**
 * The runs in the store, newest first, one compact card each; refreshed while
 * the panel is visible.
 *
 * Run names are user text: everything is written with `textContent`, never as HTML.
 */
export class RunsView extends Widget {
  constructor(options: RunsView.IOptions = {}) {
    super();
    this.addClass('jp-DaskObserve-runs');
    this._openReport = options.openReport ?? null;
    this._onRuns = options.onRuns ?? null;
    const heading = document.createElement('h3');
    heading.textContent = 'Runs';
    this._status = document.createElement('div');
    this._status.className = 'jp-DaskObserve-runs-status';
    this._list = document.createElement('ul');
    this._list.className = 'jp-DaskObserve-runList';
    this.node.append(heading, this._status, this._list);

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
      const runs = await fetchRuns();
      this._onRuns?.(runs);
      this._render(runs);
    } catch (reason) {
      this._shown = ''; // redraw on the next success, replacing this message
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
    // Most polls return what is shown already: leave the DOM (and any text the
    // user is selecting in it) alone then.
    const signature = JSON.stringify(runs);
    if (signature === this._shown) {
      return;
    }
    this._shown = signature;
    this._status.textContent =
      runs.length === 0
        ? 'No runs recorded yet. Record one with %%dask_record in a notebook, or run "dask-observe demo".'
        : `${runs.length} run${runs.length === 1 ? '' : 's'}`;
    this._list.replaceChildren(
      ...runs.map(run => Private.runCard(run, this._openReport))
    );
  }

  private _onRuns: ((runs: IRun[]) => void) | null;
  private _openReport: ((runId: number) => void) | null;

  private _list: HTMLUListElement;
  private _shown = '';
  private _poll: Poll;
  private _status: HTMLDivElement;
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
    /**
     * Open a run's report in the main area; without it, cards have no button.
     */
    openReport?: (runId: number) => void;
    /**
     * Told the runs, newest first, on every refresh.
     */
    onRuns?: (runs: IRun[]) => void;
  }
}

namespace Private {
  /**
   * An element with a class and text content (never parsed as HTML).
   */
  export function span(className: string, text: string): HTMLSpanElement {
    const element = document.createElement('span');
    element.className = className;
    element.textContent = text;
    return element;
  }

  /**
   * One run: its name and status, then tasks, wall time, start and id.
   */
  export function runCard(
    run: IRun,
    openReport: ((runId: number) => void) | null
  ): HTMLLIElement {
    const item = document.createElement('li');
    item.className = `jp-DaskObserve-run jp-DaskObserve-run-${run.status}`;
    item.dataset.runId = String(run.id);

    const head = document.createElement('div');
    head.className = 'jp-DaskObserve-run-head';
    head.append(
      span('jp-DaskObserve-run-name', run.name),
      span('jp-DaskObserve-run-status', run.status)
    );

    const tasks =
      `${run.n_tasks} task${run.n_tasks === 1 ? '' : 's'}` +
      (run.n_failed > 0 ? `, ${run.n_failed} failed` : '');
    const meta = document.createElement('div');
    meta.className = 'jp-DaskObserve-run-meta';
    meta.append(span('jp-DaskObserve-run-tasks', tasks));
    if (run.duration_s !== null) {
      meta.append(
        span('jp-DaskObserve-run-time', formatSeconds(run.duration_s))
      );
    }
    meta.append(
      span(
        'jp-DaskObserve-run-started',
        new Date(run.started * 1000).toLocaleString()
      ),
      span('jp-DaskObserve-run-id', `#${run.id}`)
    );
    item.append(head, meta);
    if (openReport !== null && run.status !== 'running') {
      const button = document.createElement('button');
      button.className = 'jp-DaskObserve-run-report';
      button.textContent = 'Report';
      button.title = `Open the report of run ${run.id}`;
      button.addEventListener('click', () => openReport(run.id));
      meta.append(button);
    }
    item.title = run.cluster ? `Recorded on ${run.cluster}` : '';
    return item;
  }

  /**
   * "0.42 s", "12.3 s", "4 min 05 s".
   */
  export function formatSeconds(seconds: number): string {
    if (seconds < 10) {
      return `${seconds.toFixed(2)} s`;
    }
    if (seconds < 60) {
      return `${seconds.toFixed(1)} s`;
    }
    const minutes = Math.floor(seconds / 60);
    const rest = Math.round(seconds % 60);
    return `${minutes} min ${String(rest).padStart(2, '0')} s`;
  }
}
