import { Widget } from '@lumino/widgets';

import type { IArchiveRun } from '../../data/api';
import { button, element, heading, patchList } from '../../ui/dom';
import { RUNS_PAGE } from '../../data/polledlist';
import type { TeamModel } from './model';
import { TwoPicks } from '../../ui/picks';
import { cardHead, cardMeta, runCard } from '../../ui/cards';

/**
 * The team's runs: those published to the archive (`observe.archive`) from
 * any machine, newest first, beside this machine's runs. Each opens its
 * report; two ticked open their comparison.
 *
 * Names, hosts and users are others' text: written with `textContent` only.
 */
export class TeamView extends Widget {
  constructor(options: TeamView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-team');
    this._options = options;
    this._status = element('div', 'jp-DaskObserve-team-status');
    this._compare = button('jp-DaskObserve-team-compare', '', () => {
      // Listed newest first: the comparison is the newer against the older.
      const [b, a] = this._model.items
        .filter(run => this._picks.picked.has(run.id))
        .map(run => run.id);
      if (a !== undefined && b !== undefined) {
        options.openComparison(a, b);
      }
    });
    this._list = element('ul', 'jp-DaskObserve-runList');
    this._more = button('jp-DaskObserve-team-more', '', () => {
      // Fetched from the server, which answers only the cards shown.
      this._model.limit += RUNS_PAGE;
    });
    this._more.hidden = true;
    this._picks = new TwoPicks(this._list, () => this._showPicked());
    this.node.append(
      heading('Team'),
      this._status,
      this._compare,
      this._list,
      this._more
    );
    this._model = options.model;
    this._model.changed.connect((_, runs) => this._render(runs), this);
    this._model.failed.connect((_, reason) => {
      this._status.textContent = `Cannot list the team's runs: ${String(reason)}`;
    }, this);
    this._showPicked();
    this._status.textContent = 'Reading the team’s runs…';
  }

  private _render(runs: readonly IArchiveRun[]): void {
    const archive = this._model.archive;
    const total = Math.max(this._model.total, runs.length);
    const n = total.toLocaleString();
    this._status.textContent =
      archive === null
        ? 'No team archive. Set observe.archive where Jupyter runs (e.g. DASK_OBSERVE__ARCHIVE=s3://bucket/runs) to see every machine’s runs here.'
        : total === 0
          ? `No runs published to ${archive} yet.`
          : runs.length < total
            ? `${n} runs in ${archive}, the newest ${runs.length.toLocaleString()} shown`
            : `${n} run${total === 1 ? '' : 's'} in ${archive}`;
    const skipped = this._model.skipped;
    if (archive !== null && skipped > 0) {
      this._status.textContent += ` (${skipped} entr${skipped === 1 ? 'y' : 'ies'} skipped: not valid runs)`;
    }
    this._compare.hidden = runs.length < 2; // nothing to compare
    this._picks.keepOnly(new Set(runs.map(run => run.id))); // pruned meanwhile
    patchList(
      this._list,
      runs.map(run => this._card(run)),
      'data-run-id'
    );
    const left = total - runs.length;
    this._more.hidden = left <= 0;
    this._more.textContent = `Show ${Math.min(left, RUNS_PAGE).toLocaleString()} more of ${left.toLocaleString()}`;
  }

  private _card(run: IArchiveRun): HTMLLIElement {
    const item = runCard(run, run.id);
    const head = cardHead(run, this._picks.box(run.id));
    const meta = cardMeta(run);
    const where = [run.user, run.host].filter(Boolean).join('@');
    meta.append(element('span', 'jp-DaskObserve-team-where', where));
    if (run.status !== 'running') {
      meta.append(
        button(
          'jp-DaskObserve-run-report',
          'Report',
          () => this._options.openReport(run.id),
          `Open the report of ${run.id}`
        )
      );
    }
    item.append(head, meta);
    item.title = `${run.id}${run.cluster ? ` · recorded on ${run.cluster}` : ''}`;
    return item;
  }

  private _showPicked(): void {
    const paired = this._picks.pair !== null;
    this._compare.disabled = !paired;
    this._compare.textContent = paired
      ? 'Compare the two runs'
      : 'Tick two runs to compare them';
  }

  private _compare: HTMLButtonElement;
  private _list: HTMLUListElement;
  private _model: TeamModel;
  private _more: HTMLButtonElement;
  private _options: TeamView.IOptions;
  private _picks: TwoPicks<string>;
  private _status: HTMLDivElement;
}

/**
 * The namespace for `TeamView` statics.
 */
export namespace TeamView {
  export interface IOptions {
    /**
     * The team's runs (polled while the panel shows).
     */
    model: TeamModel;
    /**
     * Open the report of a run of the archive in the main area.
     */
    openReport: (uid: string) => void;
    /**
     * Open run `b` compared against run `a` (a the older).
     */
    openComparison: (a: string, b: string) => void;
  }
}
