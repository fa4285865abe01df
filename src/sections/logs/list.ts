import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import { element } from '../../ui/dom';
import { clockTime } from '../../ui/format';
import type { ILogLine } from '../../data/api';

/**
 * Pixel height of one line; the list is virtualized on it. Narrower than
 * `NARROW_PX` (the sidebar), a line takes two rows: its message across the
 * whole width, then its time, level and where it came from, small.
 */
const ROW_HEIGHT = 18;
const NARROW_ROW_HEIGHT = 34;
const NARROW_PX = 480;

/**
 * Lines drawn beyond the visible ones, above and below.
 */
const OVERSCAN = 10;

/**
 * A virtual list of log lines: only the lines in view (and a few around) are
 * in the DOM, so 100,000 lines scroll as easily as 100. Lines are untrusted
 * text: written with `textContent` only.
 */
export class LogList {
  constructor() {
    this.node = element('div', 'jp-DaskObserve-logs-viewport');
    this._spacer = element('div', 'jp-DaskObserve-logs-spacer');
    this._rows = element('div', 'jp-DaskObserve-logs-rows');
    this._spacer.append(this._rows);
    this.node.append(this._spacer);
    // Also after the list's own scroll to the newest line (scroll events come
    // a frame later), which finds the bottom in view: following goes on.
    this.node.addEventListener('scroll', () => {
      const atBottom =
        this.node.scrollTop + this.node.clientHeight >=
        this.node.scrollHeight - this._rowHeight;
      this._scrolled.emit(atBottom);
    });
  }

  /**
   * The scrolling viewport.
   */
  readonly node: HTMLDivElement;

  /**
   * Told when the list scrolls: whether the bottom is in view.
   */
  get scrolled(): ISignal<this, boolean> {
    return this._scrolled;
  }

  /**
   * Whether the lines drawn are those in view at the list's scroll position
   * now: after its own scroll to the newest line, which `draw` drew at once,
   * its scroll event needs no second drawing (a whole frame of the sidebar's
   * layout and paint at each batch a replay draws).
   */
  get drawnInView(): boolean {
    return this.node.scrollTop === this._drawnTop;
  }

  /**
   * Draw the lines in view; with `follow`, scroll to the newest first. Lines
   * of `gone` workers are marked.
   */
  draw(
    lines: readonly ILogLine[],
    gone: ReadonlySet<string>,
    follow: boolean
  ): void {
    const viewport = this.node;
    // (A width of 0: not laid out yet, drawn again when it shows.)
    const narrow = viewport.clientWidth > 0 && viewport.clientWidth < NARROW_PX;
    const height = narrow ? NARROW_ROW_HEIGHT : ROW_HEIGHT;
    const top = Math.floor(viewport.scrollTop / this._rowHeight);
    const resized = height !== this._rowHeight;
    this._rowHeight = height;
    viewport.classList.toggle('jp-mod-narrow', narrow);
    this._spacer.style.height = `${lines.length * height}px`;
    if (resized) {
      viewport.scrollTop = top * height; // the same line stays on top
    }
    if (follow) {
      viewport.scrollTop = viewport.scrollHeight;
    }
    const first = Math.max(
      0,
      Math.floor(viewport.scrollTop / height) - OVERSCAN
    );
    const visible = Math.ceil(viewport.clientHeight / height) + 2 * OVERSCAN;
    this._drawnTop = viewport.scrollTop;
    this._rows.style.transform = `translateY(${first * height}px)`;
    this._rows.replaceChildren(
      ...lines
        .slice(first, first + visible)
        .map(line => Private.row(line, gone))
    );
  }

  /**
   * Forget the listeners (the view is disposed).
   */
  dispose(): void {
    Signal.clearData(this);
  }

  private _drawnTop = -1;
  private _rowHeight = ROW_HEIGHT;
  private _rows: HTMLDivElement;
  private _scrolled = new Signal<this, boolean>(this);
  private _spacer: HTMLDivElement;
}

/**
 * A worker's address, short enough for a narrow column: without its scheme;
 * on this machine (loopback) its port alone; an in-process worker by the
 * part after its process; a host name by its first label.
 */
export function shortWorker(address: string): string {
  const bare = address.replace(/^\w+:\/\//, '');
  if (address.startsWith('inproc://')) {
    return bare.slice(bare.indexOf('/') + 1) || bare;
  }
  const found = /^(\[[^\]]+\]|[^:/]+):(\d+)$/.exec(bare);
  if (!found) {
    return bare;
  }
  const [, host, port] = found;
  if (/^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/.test(host)) {
    return `:${port}`;
  }
  const named = /^[a-z][\w-]*(\.|$)/i.test(host) && !/^\d/.test(host);
  return `${named ? host.split('.')[0] : host}:${port}`;
}

namespace Private {
  /**
   * One line: time, level, where from, and the message's first line (the whole
   * message in the tooltip, with the task that wrote it and its fields).
   */
  export function row(
    line: ILogLine,
    gone: ReadonlySet<string>
  ): HTMLDivElement {
    const row = element(
      'div',
      `jp-DaskObserve-log jp-DaskObserve-log-${line.level}`
    );
    row.dataset.seq = String(line.seq);
    // Compact, for a narrow sidebar: 24-hour time, workers without "tcp://".
    const time = clockTime(line.time, true);
    const where = element(
      'span',
      'jp-DaskObserve-log-where',
      line.worker ? shortWorker(line.worker) : line.source
    );
    if (line.worker) {
      where.title = line.worker; // the whole address, on hover
    }
    row.append(
      element('span', 'jp-DaskObserve-log-time', time),
      element('span', 'jp-DaskObserve-log-level', line.level),
      where,
      element(
        'span',
        'jp-DaskObserve-log-message',
        line.message.split('\n', 1)[0]
      )
    );
    const about = [
      line.message,
      ...(line.task ? [`task: ${line.task}`] : []),
      ...(line.fields ? [line.fields] : [])
    ].join('\n');
    row.title = about;
    if (line.worker && gone.has(line.worker)) {
      // From a worker that has since died or left: its logs live only here now.
      row.classList.add('jp-mod-gone');
      row.title = `(${line.worker} has left the cluster)\n${about}`;
    }
    return row;
  }
}
