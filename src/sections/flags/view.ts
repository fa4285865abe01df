import { Widget } from '@lumino/widgets';

import { element, heading, patchList } from '../../ui/dom';
import { clockTime } from '../../ui/format';
import type { FlagsModel } from './model';
import { StreamStatus } from '../../panel/status';
import type { IFlag } from '../../data/api';

/**
 * The flags of the newest run, newest first: severity, kind, message and advice;
 * a click shows the evidence. All of it is text (`textContent`), never HTML.
 */
export class FlagsView extends Widget {
  constructor(model: FlagsModel) {
    super();
    this.addClass('jp-DaskObserve-flags');
    this._model = model;
    const head = heading('Flags');
    this._run = element('span', 'jp-DaskObserve-flags-run');
    this._status = new StreamStatus(model.stream);
    head.append(' ', this._run, ' ', this._status.node);
    this._list = element('ul', 'jp-DaskObserve-flagList');
    this._empty = element('div', 'jp-DaskObserve-flags-empty', 'No flags.');
    this.node.append(head, this._empty, this._list);
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this._status.dispose();
    super.dispose();
  }

  /**
   * Show the run's flags, newest first.
   */
  private _render(): void {
    const { runId, flags } = this._model;
    this._run.textContent = runId === null ? '' : `run ${runId}`;
    this._empty.hidden = flags.length > 0;
    const newest = [...flags].sort((a, b) => b.time - a.time);
    const keys = new Set(newest.map(Private.key));
    for (const key of this._open) {
      if (!keys.has(key)) {
        this._open.delete(key); // another run's, or judged away
      }
    }
    // Cards patched in place: the server sends the flags whole each time one
    // changes, and a card redrawn under the pointer lost the click.
    patchList(
      this._list,
      newest.map(flag => Private.card(flag, this._open)),
      'data-flag'
    );
  }

  /**
   * The flags whose evidence the user opened (by `Private.key`): kept open
   * when the flags are sent again.
   */
  private _open = new Set<string>();

  private _empty: HTMLDivElement;
  private _list: HTMLUListElement;
  private _model: FlagsModel;
  private _run: HTMLSpanElement;
  private _status: StreamStatus;
}

namespace Private {
  /**
   * What a flag is, whatever its evidence so far: its kind, worker and time.
   */
  export function key(flag: IFlag): string {
    return JSON.stringify([flag.kind, flag.worker, flag.time]);
  }

  /**
   * A flag's card; its evidence shows if its key is in `open`, and a click
   * shows or hides it (and says so in `open`).
   */
  export function card(flag: IFlag, open: Set<string>): HTMLLIElement {
    const item = element('li', `jp-DaskObserve-flag jp-mod-${flag.severity}`);
    const id = key(flag);
    item.dataset.kind = flag.kind;
    item.dataset.flag = id;
    const head = element('div', 'jp-DaskObserve-flag-head');
    head.append(
      element('span', 'jp-DaskObserve-flag-kind', flag.kind),
      element('span', 'jp-DaskObserve-flag-severity', flag.severity)
    );
    const evidence = element('ul', 'jp-DaskObserve-flag-evidence');
    evidence.hidden = !open.has(id);
    evidence.append(
      ...flag.evidence.map(e =>
        element(
          'li',
          'jp-DaskObserve-flag-line',
          `${clockTime(e.time)} ${e.worker ?? ''} ${e.text}`
        )
      )
    );
    item.append(
      head,
      element('div', 'jp-DaskObserve-flag-message', flag.message),
      element('div', 'jp-DaskObserve-flag-advice', flag.advice),
      evidence
    );
    item.title = 'Click to show or hide the evidence';
    // A card listed again keeps its node, this listener and this list
    // (patchList): `evidence` is always the one shown.
    item.addEventListener('click', () => {
      evidence.hidden = !evidence.hidden;
      if (evidence.hidden) {
        open.delete(id);
      } else {
        open.add(id);
      }
    });
    return item;
  }
}
