import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { heading } from './dom';
import { ConnectionState, IGap, ILogLine, LogStream } from './stream';

/**
 * Pixel height of one line; the list is virtualized on it.
 */
const ROW_HEIGHT = 18;

/**
 * Lines drawn beyond the visible ones, above and below.
 */
const OVERSCAN = 10;

/**
 * Milliseconds of filtering per main-thread task: a filter over a large buffer
 * (the setting allows 1,000,000 lines) goes on in slices, so that typing,
 * scrolling and arriving lines are not held up.
 */
const FILTER_SLICE_MS = 25;

/**
 * A filter being applied to the buffer, a slice at a time.
 */
interface IRefilter {
  id: number;
  matches: (line: ILogLine) => boolean;
  /**
   * The index in the buffer it goes on from.
   */
  next: number;
  /**
   * The lines that passed so far.
   */
  shown: ILogLine[];
}

/**
 * Rows a live view starts with: about the newest so many of its cluster.
 */
export const LOG_TAIL = 20_000;

const LEVELS: Record<string, number> = {
  DEBUG: 10,
  INFO: 20,
  WARNING: 30,
  ERROR: 40,
  CRITICAL: 50
};

/**
 * Live log lines of every process of the cluster, interleaved in store order.
 *
 * Filters by text (or a regular expression) and lowest level; follows the
 * newest line or pauses; keeps at most `maxLines` (the oldest go first) and
 * draws only the lines in view, so 100,000 lines scroll as easily as 100.
 * Lines are untrusted text: they are written with `textContent` only.
 */
export class LogsView extends Widget {
  constructor(options: LogsView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-logs');
    this._stream = options.stream;
    this._maxLines = options.maxLines ?? 100_000;

    const head = heading('Logs');
    this._subject = document.createElement('span');
    this._subject.className = 'jp-DaskObserve-logs-subject';
    this._state = document.createElement('span');
    this._state.className = 'jp-DaskObserve-logs-state';
    head.append(' ', this._subject, ' ', this._state);
    if (options.openInTab) {
      // The sidebar is narrow for long lines: the same view, wide, in a tab.
      const open = document.createElement('button');
      open.className = 'jp-DaskObserve-logs-open';
      open.textContent = 'Open in a tab';
      open.title = 'Follow these logs in a main-area tab';
      open.addEventListener('click', options.openInTab);
      head.append(open);
    }

    const bar = document.createElement('div');
    bar.className = 'jp-DaskObserve-logs-bar';
    this._filter = document.createElement('input');
    this._filter.type = 'search';
    this._filter.placeholder = 'filter';
    this._filter.className = 'jp-DaskObserve-logs-filter';
    this._regex = this._checkbox('regex', false);
    this._level = document.createElement('select');
    this._level.className = 'jp-DaskObserve-logs-level';
    for (const name of ['DEBUG', 'INFO', 'WARNING', 'ERROR']) {
      const option = document.createElement('option');
      option.value = name;
      option.textContent = name.toLowerCase() + '+';
      this._level.append(option);
    }
    this._level.value = options.level ?? 'DEBUG';
    this._source = this._select('source', ['scheduler', 'worker', 'nanny']);
    this._worker = this._select('worker', []);
    this._follow = this._checkbox('follow', true);
    this._count = document.createElement('span');
    this._count.className = 'jp-DaskObserve-logs-count';
    bar.append(
      this._filter,
      this._regex.parentElement!,
      this._level,
      this._source,
      this._worker,
      this._follow.parentElement!,
      this._count
    );

    this._viewport = document.createElement('div');
    this._viewport.className = 'jp-DaskObserve-logs-viewport';
    this._spacer = document.createElement('div');
    this._spacer.className = 'jp-DaskObserve-logs-spacer';
    this._rows = document.createElement('div');
    this._rows.className = 'jp-DaskObserve-logs-rows';
    this._spacer.append(this._rows);
    this._viewport.append(this._spacer);
    this.node.append(head, bar, this._viewport);

    const controls = [
      this._filter,
      this._regex,
      this._level,
      this._source,
      this._worker
    ];
    for (const control of controls) {
      control.addEventListener('input', () => this._refilter());
    }
    this._viewport.addEventListener('scroll', () => {
      // Scrolling up pauses following; back at the bottom resumes it.
      const atBottom =
        this._viewport.scrollTop + this._viewport.clientHeight >=
        this._viewport.scrollHeight - ROW_HEIGHT;
      if (this._follow.checked !== atBottom && !this._scrolling) {
        this._follow.checked = atBottom;
      }
      this._schedule();
    });
    this._follow.addEventListener('change', () => this._schedule());
    this._nextSlice.port1.onmessage = event => {
      if (event.data === this._refiltering?.id) {
        this._filterSlice();
      }
    };
    this._stream.lines.connect((_, lines) => this._append(lines));
    this._stream.reset.connect(() => this._clear());
    this._stream.stateChanged.connect((_, state) => this._showState(state));
    this._stream.gaps.connect((_, gap) => this._showGap(gap));
    this._stream.failed.connect((_, message) => {
      this._state.textContent = `(${message})`; // text: it may quote the store
      this._state.dataset.state = 'error';
    });
    this._showState(this._stream.state);
  }

  /**
   * The lines that pass the filters, oldest first.
   */
  get shown(): readonly ILogLine[] {
    return this._shown;
  }

  /**
   * Lines kept at most; the oldest go first.
   */
  get maxLines(): number {
    return this._maxLines;
  }

  set maxLines(value: number) {
    this._maxLines = value;
    this._append([]);
  }

  /**
   * The lowest level shown (DEBUG, INFO, WARNING or ERROR).
   */
  get level(): string {
    return this._level.value;
  }

  set level(value: string) {
    this._level.value = value;
    this._refilter();
  }

  dispose(): void {
    this._stopRefilter();
    this._nextSlice.port1.close();
    this._nextSlice.port2.close();
    super.dispose();
  }

  /**
   * Say whose lines these are, when it is not the live cluster's (text).
   */
  setSubject(text: string): void {
    this._subject.textContent = text;
  }

  /**
   * Mark the lines of these workers: they have left the cluster.
   */
  setGone(workers: ReadonlySet<string>): void {
    this._gone = workers;
    this._schedule();
  }

  /**
   * Lines that arrived while the panel was hidden were laid out in no space:
   * draw (and follow) again once it shows or changes size.
   */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._schedule();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._schedule();
  }

  private _checkbox(label: string, checked: boolean): HTMLInputElement {
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.checked = checked;
    const wrapper = document.createElement('label');
    wrapper.className = `jp-DaskObserve-logs-${label}`;
    wrapper.append(box, ` ${label}`);
    return box;
  }

  /**
   * A choice of one value or all (the empty value).
   */
  private _select(name: string, values: string[]): HTMLSelectElement {
    const select = document.createElement('select');
    select.className = `jp-DaskObserve-logs-${name}`;
    select.title = `Show the lines of one ${name}`;
    select.append(new Option(`all ${name}s`, ''));
    for (const value of values) {
      select.append(new Option(value, value));
    }
    return select;
  }

  private _clear(): void {
    this._stopRefilter();
    this._all = [];
    this._shown = [];
    this._workers.clear();
    this._worker.replaceChildren(this._worker.options[0]);
    this._schedule();
  }

  /**
   * Lines the server skipped (the view fell behind) and that could not be
   * read after: said in their place, never a silent hole.
   */
  private _showGap(gap: IGap): void {
    if (gap.filled) {
      return; // its lines arrived in their place
    }
    const before = this._all[this._all.length - 1];
    this._append([
      {
        seq: gap.upto,
        time: before?.time ?? Date.now() / 1000,
        level: 'WARNING',
        source: 'dask-observe',
        worker: null,
        logger: 'dask-observe',
        message:
          'Lines are missing here: the view fell behind and they could not ' +
          'be read (reopen the view, or read the run with dask-observe logs).'
      }
    ]);
  }

  private _showState(state: ConnectionState): void {
    this._state.textContent = state === 'open' ? '' : `(${state})`;
    this._state.dataset.state = state;
  }

  private _matcher(): (line: ILogLine) => boolean {
    const level = LEVELS[this._level.value] ?? 0;
    const text = this._filter.value;
    let test: (message: string) => boolean = () => true;
    this._filter.classList.remove('jp-mod-invalid');
    if (text && this._regex.checked) {
      try {
        const pattern = new RegExp(text);
        test = message => pattern.test(message);
      } catch {
        this._filter.classList.add('jp-mod-invalid');
      }
    } else if (text) {
      const lowered = text.toLowerCase();
      test = message => message.toLowerCase().includes(lowered);
    }
    const source = this._source.value;
    const worker = this._worker.value;
    return line =>
      (LEVELS[line.level] ?? 0) >= level &&
      (!source || line.source === source) &&
      (!worker || line.worker === worker) &&
      test(`${line.worker ?? line.source} ${line.message}`);
  }

  /**
   * Offer this worker in the worker filter (whether or not it logged yet).
   */
  addWorker(worker: string): void {
    if (!this._workers.has(worker)) {
      this._workers.add(worker);
      this._worker.append(new Option(worker, worker));
    }
  }

  private _append(lines: ILogLine[]): void {
    for (const line of lines) {
      if (line.worker) {
        this.addWorker(line.worker);
      }
    }
    this._all.push(...lines);
    const job = this._refiltering;
    if (job === null) {
      this._shown.push(...lines.filter(this._matcher()));
    } // else the filter under way reaches them: they are in the buffer now
    const excess = this._all.length - this._maxLines;
    if (excess > 0) {
      const dropped = this._all.splice(0, excess);
      const lastDropped = dropped[dropped.length - 1].seq;
      Private.dropUpTo(this._shown, lastDropped);
      if (job !== null) {
        job.next = Math.max(0, job.next - excess);
        Private.dropUpTo(job.shown, lastDropped);
      }
    }
    this._schedule();
  }

  private _refilter(): void {
    this._stopRefilter();
    this._refiltering = {
      id: ++this._refilters,
      matches: this._matcher(),
      next: 0,
      shown: []
    };
    this._filterSlice();
  }

  /**
   * Filter the buffer for about FILTER_SLICE_MS, then yield to the page and
   * go on; the view shows the result once the whole buffer is done.
   */
  private _filterSlice(): void {
    const job = this._refiltering;
    if (job === null) {
      return;
    }
    const all = this._all;
    const until = performance.now() + FILTER_SLICE_MS;
    while (job.next < all.length && performance.now() < until) {
      const end = Math.min(all.length, job.next + 5000);
      for (let i = job.next; i < end; i++) {
        if (job.matches(all[i])) {
          job.shown.push(all[i]);
        }
      }
      job.next = end;
    }
    if (job.next < all.length) {
      // A message, not setTimeout: nested timeouts wait at least 4 ms each.
      this._nextSlice.port2.postMessage(job.id);
    } else {
      this._shown = job.shown;
      this._refiltering = null;
    }
    this._schedule();
  }

  private _stopRefilter(): void {
    this._refiltering = null; // a slice already posted for it finds it gone
  }

  private _schedule(): void {
    if (this._frame === 0) {
      this._frame = requestAnimationFrame(() => {
        this._frame = 0;
        this._draw();
      });
    }
  }

  private _draw(): void {
    const total = this._shown.length;
    this._spacer.style.height = `${total * ROW_HEIGHT}px`;
    const job = this._refiltering;
    this._count.textContent =
      job === null
        ? `${total.toLocaleString()} of ${this._all.length.toLocaleString()} lines`
        : `filtering… ${Math.floor((100 * job.next) / Math.max(1, this._all.length))} %`;
    this._count.dataset.filtering = String(job !== null);
    if (this._follow.checked) {
      this._scrolling = true;
      this._viewport.scrollTop = this._viewport.scrollHeight;
      this._scrolling = false;
    }
    const first = Math.max(
      0,
      Math.floor(this._viewport.scrollTop / ROW_HEIGHT) - OVERSCAN
    );
    const visible =
      Math.ceil(this._viewport.clientHeight / ROW_HEIGHT) + 2 * OVERSCAN;
    const rows = this._shown
      .slice(first, first + visible)
      .map(line => Private.row(line, this._gone));
    this._rows.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    this._rows.replaceChildren(...rows);
  }

  private _all: ILogLine[] = [];
  private _gone: ReadonlySet<string> = new Set();
  private _source: HTMLSelectElement;
  private _worker: HTMLSelectElement;
  private _workers = new Set<string>();
  private _count: HTMLSpanElement;
  private _filter: HTMLInputElement;
  private _follow: HTMLInputElement;
  private _frame = 0;
  private _level: HTMLSelectElement;
  private _maxLines: number;
  private _nextSlice = new MessageChannel();
  private _refiltering: IRefilter | null = null;
  private _refilters = 0;
  private _regex: HTMLInputElement;
  private _rows: HTMLDivElement;
  private _scrolling = false;
  private _shown: ILogLine[] = [];
  private _spacer: HTMLDivElement;
  private _state: HTMLSpanElement;
  private _subject: HTMLSpanElement;
  private _stream: LogStream;
  private _viewport: HTMLDivElement;
}

/**
 * The namespace for `LogsView` statics.
 */
export namespace LogsView {
  export interface IOptions {
    /**
     * Where the lines come from.
     */
    stream: LogStream;
    /**
     * Lines kept at most; the oldest go first.
     */
    maxLines?: number;
    /**
     * The lowest level shown at first (default DEBUG: everything).
     */
    level?: string;
    /**
     * When given, a button in the heading calls it (to open these logs wide).
     */
    openInTab?: () => void;
  }
}

namespace Private {
  /**
   * Remove, in place, the leading lines numbered up to `seq` (they left the
   * buffer).
   */
  export function dropUpTo(lines: ILogLine[], seq: number): void {
    const keep = lines.findIndex(line => line.seq > seq);
    lines.splice(0, keep < 0 ? lines.length : keep);
  }

  function span(className: string, text: string): HTMLSpanElement {
    const element = document.createElement('span');
    element.className = className;
    element.textContent = text;
    return element;
  }

  /**
   * One line: time, level, where from, and the message's first line (the whole
   * message in the tooltip).
   */
  export function row(
    line: ILogLine,
    gone: ReadonlySet<string>
  ): HTMLDivElement {
    const element = document.createElement('div');
    element.className = `jp-DaskObserve-log jp-DaskObserve-log-${line.level}`;
    element.dataset.seq = String(line.seq);
    // Compact, for a narrow sidebar: 24-hour time, workers without "tcp://".
    const time = new Date(line.time * 1000).toLocaleTimeString([], {
      hour12: false
    });
    const message = line.message.split('\n', 1)[0];
    element.append(
      span('jp-DaskObserve-log-time', time),
      span('jp-DaskObserve-log-level', line.level),
      span(
        'jp-DaskObserve-log-where',
        line.worker?.replace(/^\w+:\/\//, '') ?? line.source
      ),
      span('jp-DaskObserve-log-message', message)
    );
    element.title = line.message;
    if (line.worker && gone.has(line.worker)) {
      // From a worker that has since died or left: its logs live only here now.
      element.classList.add('jp-mod-gone');
      element.title = `(${line.worker} has left the cluster)\n${line.message}`;
    }
    return element;
  }
}
