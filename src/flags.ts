import { Widget } from '@lumino/widgets';

import { element, heading } from './dom';
import { FlagsModel } from './models';
import { StreamStatus } from './status';
import { IFlag } from './api';

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
    this._list.replaceChildren(...newest.map(Private.card));
  }

  private _empty: HTMLDivElement;
  private _list: HTMLUListElement;
  private _model: FlagsModel;
  private _run: HTMLSpanElement;
  private _status: StreamStatus;
}

namespace Private {
  export function card(flag: IFlag): HTMLLIElement {
    const item = element('li', `jp-DaskObserve-flag jp-mod-${flag.severity}`);
    item.dataset.kind = flag.kind;
    const head = element('div', 'jp-DaskObserve-flag-head');
    head.append(
      element('span', 'jp-DaskObserve-flag-kind', flag.kind),
      element('span', 'jp-DaskObserve-flag-severity', flag.severity)
    );
    const evidence = element('ul', 'jp-DaskObserve-flag-evidence');
    evidence.hidden = true;
    evidence.append(
      ...flag.evidence.map(e =>
        element(
          'li',
          'jp-DaskObserve-flag-line',
          `${new Date(e.time * 1000).toLocaleTimeString()} ${e.worker ?? ''} ${e.text}`
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
    item.addEventListener('click', () => {
      evidence.hidden = !evidence.hidden;
    });
    return item;
  }
}
