import { Widget } from '@lumino/widgets';

import type { IRun } from '../../data/api';
import { button, element, heading, patchList } from '../../ui/dom';
import { RUNS_PAGE } from '../../data/polledlist';
import type { RunsModel } from './model';
import { TwoPicks } from '../../ui/picks';
import { cardHead, cardMeta, runCard as card } from '../../ui/cards';

/**
 * The runs in the store, newest first, one compact card each, as its model
 * reads them.
 *
 * Run names are user text: everything is written with `textContent`, never as HTML.
 */
export class RunsView extends Widget {
  constructor(options: RunsView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-runs');
    const head = heading('Runs');
    this._status = element('div', 'jp-DaskObserve-runs-status');
    this._compare = button('jp-DaskObserve-runs-compare', '', () => {
      const [a, b] = [...this._picks.picked].sort((x, y) => x - y);
      options.openComparison?.(a, b);
    });
    this._list = element('ul', 'jp-DaskObserve-runList');
    this._more = button('jp-DaskObserve-runs-more', '', () => {
      // Fetched from the server, which answers only the cards shown.
      this._model.limit += RUNS_PAGE;
    });
    this._picks = new TwoPicks(this._list, () => this._showPicked());
    this._actions = {
      openReport: options.openReport ?? null,
      replay: options.replay ?? null,
      showHistory: options.showHistory ?? null,
      box: runId => this._picks.box(runId)
    };
    this._showPicked();
    this.node.append(head, this._status, this._compare, this._list, this._more);
    const model = (this._model = options.model);
    model.changed.connect((_, runs) => this._render(runs), this);
    model.failed.connect((_, reason) => {
      this._status.textContent = `Cannot list runs: ${String(reason)}`;
    }, this);
    this._render(model.items, model.items.length === 0);
  }

  /**
   * Draw the runs (told only when they changed: the DOM, and any text the user
   * is selecting in it, stays otherwise). `unknown`: not fetched yet.
   */
  private _render(runs: readonly IRun[], unknown = false): void {
    // The newest pages of cards, more on demand: a year's 1,000 cards took
    // ~0.4 s of the page's main thread each time the list was drawn.
    const shown = runs.slice(0, this._model.limit);
    const total = Math.max(this._model.total, runs.length);
    const n = total.toLocaleString();
    this._status.textContent = unknown
      ? 'Reading the runs…'
      : total === 0
        ? 'No runs recorded yet. Record one with %%dask_record in a notebook, or run "dask-observe demo".'
        : shown.length < total
          ? `${n} runs, the newest ${shown.length.toLocaleString()} shown`
          : `${n} run${total === 1 ? '' : 's'}`;
    // Nothing to compare with fewer than two runs: no button that says so.
    this._compare.hidden = total < 2;
    this._picks.keepOnly(new Set(shown.map(run => run.id))); // deleted meanwhile
    patchList(
      this._list,
      shown.map(run => Private.runCard(run, this._actions)),
      'data-run-id'
    );
    const left = total - shown.length;
    this._more.hidden = left <= 0;
    this._more.textContent = `Show ${Math.min(left, RUNS_PAGE).toLocaleString()} more of ${left.toLocaleString()}`;
  }

  private _showPicked(): void {
    const pair = this._picks.pair;
    const [a, b] = pair ? [...pair].sort((x, y) => x - y) : [];
    this._compare.disabled = pair === null;
    this._compare.textContent = pair
      ? `Compare #${a} with #${b}`
      : 'Tick two runs to compare them';
  }

  private _actions: Private.IActions;
  private _compare: HTMLButtonElement;
  private _picks: TwoPicks<number>;

  private _list: HTMLUListElement;
  private _model: RunsModel;
  private _more: HTMLButtonElement;
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
     * The runs to show (the panel's, polled while it shows).
     */
    model: RunsModel;
    /**
     * Open a run's report in the main area; without it, cards have no button.
     */
    openReport?: (runId: number) => void;
    /**
     * Open the comparison of run `b` against run `a` (a < b).
     */
    openComparison?: (a: number, b: number) => void;
    /**
     * Show a run's logs and metrics again in the live views.
     */
    replay?: (runId: number) => void;
    /**
     * Show the history of the run's name; without it, cards have no button.
     */
    showHistory?: (runId: number) => void;
  }
}

namespace Private {
  /**
   * What a run card's controls do.
   */
  export interface IActions {
    openReport: ((runId: number) => void) | null;
    replay: ((runId: number) => void) | null;
    showHistory: ((runId: number) => void) | null;
    box: (runId: number) => HTMLInputElement;
  }

  /**
   * One run: its name and status, then tasks, wall time, start and id.
   */
  export function runCard(run: IRun, actions: IActions): HTMLLIElement {
    const item = card(run, run.id);
    const head = cardHead(run, actions.box(run.id));
    if (run.partial) {
      // The cluster did not take the capture plugins: say so, and why on hover.
      const partial = element('span', 'jp-DaskObserve-run-partial', 'partial');
      partial.title = `Recorded partially: ${run.partial}`;
      head.append(partial);
    }
    const meta = cardMeta(run);
    meta.append(element('span', 'jp-DaskObserve-run-id', `#${run.id}`));
    item.append(head, meta);
    const { openReport, replay, showHistory } = actions;
    if (replay !== null) {
      meta.append(
        button(
          'jp-DaskObserve-run-replay',
          'Logs',
          () => replay(run.id),
          `Show the logs and metrics of run ${run.id} in the views above`
        )
      );
    }
    if (openReport !== null && run.status !== 'running') {
      meta.append(
        button(
          'jp-DaskObserve-run-report',
          'Report',
          () => openReport(run.id),
          `Open the report of run ${run.id}`
        )
      );
    }
    if (showHistory !== null) {
      meta.append(
        button(
          'jp-DaskObserve-run-history',
          'History',
          () => showHistory(run.id),
          `Show the wall time and memory of every run named like run ${run.id}`
        )
      );
    }
    item.title = run.cluster ? `Recorded on ${run.cluster}` : '';
    return item;
  }
}
