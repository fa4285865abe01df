import { Widget } from '@lumino/widgets';

import { heading } from './dom';
import { IFlag, LogStream } from './stream';

/**
 * The flags of the newest run, newest first: severity, kind, message and advice;
 * a click shows the evidence. All of it is text (`textContent`), never HTML.
 */
export class FlagsView extends Widget {
  constructor(stream: LogStream) {
    super();
    this.addClass('jp-DaskObserve-flags');
    const head = heading('Flags');
    this._run = document.createElement('span');
    this._run.className = 'jp-DaskObserve-flags-run';
    head.append(' ', this._run);
    this._list = document.createElement('ul');
    this._list.className = 'jp-DaskObserve-flagList';
    this._empty = document.createElement('div');
    this._empty.className = 'jp-DaskObserve-flags-empty';
    this._empty.textContent = 'No flags.';
    this.node.append(head, this._empty, this._list);
    stream.flags.connect((_, flags) => this.render(flags));
  }

  /**
   * Name the run whose flags are shown, and forget the previous run's.
   */
  setRun(label: string): void {
    this._run.textContent = label;
    this.render([]);
  }

  /**
   * Show these flags, newest first.
   */
  render(flags: IFlag[]): void {
    this._empty.hidden = flags.length > 0;
    const newest = [...flags].sort((a, b) => b.time - a.time);
    this._list.replaceChildren(...newest.map(Private.card));
  }

  private _empty: HTMLDivElement;
  private _list: HTMLUListElement;
  private _run: HTMLSpanElement;
}

namespace Private {
  function text(tag: string, className: string, value: string): HTMLElement {
    const element = document.createElement(tag);
    element.className = className;
    element.textContent = value;
    return element;
  }

  export function card(flag: IFlag): HTMLLIElement {
    const item = document.createElement('li');
    item.className = `jp-DaskObserve-flag jp-mod-${flag.severity}`;
    item.dataset.kind = flag.kind;
    const head = text('div', 'jp-DaskObserve-flag-head', '');
    head.append(
      text('span', 'jp-DaskObserve-flag-kind', flag.kind),
      text('span', 'jp-DaskObserve-flag-severity', flag.severity)
    );
    const evidence = document.createElement('ul');
    evidence.className = 'jp-DaskObserve-flag-evidence';
    evidence.hidden = true;
    evidence.append(
      ...flag.evidence.map(e =>
        text(
          'li',
          'jp-DaskObserve-flag-line',
          `${new Date(e.time * 1000).toLocaleTimeString()} ${e.worker ?? ''} ${e.text}`
        )
      )
    );
    item.append(
      head,
      text('div', 'jp-DaskObserve-flag-message', flag.message),
      text('div', 'jp-DaskObserve-flag-advice', flag.advice),
      evidence
    );
    item.title = 'Click to show or hide the evidence';
    item.addEventListener('click', () => {
      evidence.hidden = !evidence.hidden;
    });
    return item;
  }
}
