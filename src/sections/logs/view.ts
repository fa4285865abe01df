import { launchIcon, Toolbar, ToolbarButton } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { element, heading } from '../../ui/dom';
import { LogBuffer } from './buffer';
export { LOG_TAIL } from './buffer';
import { LogList } from './list';
import { LogsToolbar } from './toolbar';
import { stateWords } from '../../panel/status';
import type {
  ConnectionState,
  IGap,
  ILogLine,
  StoreStream
} from '../../data/stream';

/**
 * What the logs say before there is anything to follow.
 */
const NOTHING_FOLLOWED =
  'No logs yet: a cluster’s lines show once one is listed above.';

/**
 * While a replay's batches arrive (the stream says more follow), lines are
 * drawn at most this often (milliseconds): each frame drawn was a layout
 * and a paint. The last batch, and what the user does (scrolling,
 * filtering), is drawn at the next frame.
 */
const ARRIVALS_DRAW_MS = 100;

/**
 * Live log lines of every process of the cluster, interleaved in store order.
 *
 * Filters by text (or a regular expression) and lowest level; follows the
 * newest line or pauses; keeps at most `maxLines` (the oldest go first) and
 * draws only the lines in view, so 100,000 lines scroll as easily as 100.
 * The lines are a `LogBuffer`, the controls a `LogsToolbar`, the list a
 * `LogList`; this view joins them to a stream and draws once a frame.
 */
export class LogsView extends Widget {
  constructor(options: LogsView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-logs');
    this._stream = options.stream;
    this._buffer = new LogBuffer(options.maxLines ?? 100_000);
    this._toolbar = new LogsToolbar(options.level);
    this._list = new LogList();

    const head = heading('Logs');
    this._subject = element('span', 'jp-DaskObserve-logs-subject');
    this._state = element('span', 'jp-DaskObserve-logs-state');
    head.append(' ', this._subject, ' ', this._state);
    this._openInTab = options.openInTab !== undefined;
    if (options.openInTab) {
      // The sidebar is narrow for long lines: the same view, wide, in a tab.
      // An icon in the section's title, as the debugger's sections have
      // their actions (the side panel's accordion shows a view's `toolbar`).
      this.toolbar.addItem(
        'open-in-tab',
        new ToolbarButton({
          className: 'jp-DaskObserve-logs-open',
          icon: launchIcon,
          label: '',
          tooltip: 'Open in a tab: follow these logs in a main-area tab',
          onClick: options.openInTab
        })
      );
    }
    // What an empty list means, and what to do (never a blank box).
    this._empty = element('div', 'jp-DaskObserve-logs-empty');
    // A run's replay from near its end says so, and where the rest are.
    this._tail = element('div', 'jp-DaskObserve-logs-tail');
    this._tail.hidden = true;
    this.node.append(
      head,
      this._toolbar.node,
      this._tail,
      this._empty,
      this._list.node
    );

    this._buffer.setFilter(this._toolbar.matcher());
    this._buffer.changed.connect(this._schedule, this);
    this._toolbar.changed.connect(
      () => this._buffer.setFilter(this._toolbar.matcher()),
      this
    );
    this._toolbar.followChanged.connect(this._schedule, this);
    this._list.scrolled.connect((_, atBottom) => {
      // Scrolling up pauses following; back at the bottom resumes it.
      this._toolbar.follow = atBottom;
      if (!this._list.drawnInView) {
        this._schedule();
      }
    }, this);
    this._stream.lines.connect((_, lines) => {
      for (const line of lines) {
        if (line.worker) {
          this._toolbar.addWorker(line.worker);
        }
      }
      this._replaying = this._stream.more;
      try {
        this._buffer.append(lines);
      } finally {
        this._replaying = false;
      }
    }, this);
    this._stream.reset.connect(() => {
      this._toolbar.clearWorkers();
      this._buffer.clear();
    }, this);
    this._stream.stateChanged.connect(
      (_, state) => this._showState(state),
      this
    );
    this._stream.gaps.connect((_, gap) => this._showGap(gap), this);
    this._stream.failed.connect((_, message) => {
      this._state.textContent = `(${message})`; // text: it may quote the store
      this._state.dataset.state = 'error';
    }, this);
    this._showState(this._stream.state);
  }

  /**
   * The view's actions, shown in its side panel section's title.
   */
  readonly toolbar = new Toolbar();

  /**
   * The lines that pass the filters, oldest first.
   */
  get shown(): readonly ILogLine[] {
    return this._buffer.shown;
  }

  /**
   * The node of the list of lines, which scrolls by itself.
   */
  get listNode(): HTMLElement {
    return this._list.node;
  }

  /**
   * Lines kept at most; the oldest go first.
   */
  get maxLines(): number {
    return this._buffer.maxLines;
  }

  set maxLines(value: number) {
    this._buffer.maxLines = value;
  }

  /**
   * The lowest level shown (DEBUG, INFO, WARNING or ERROR).
   */
  get level(): string {
    return this._toolbar.level;
  }

  set level(value: string) {
    this._toolbar.level = value;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    Signal.disconnectReceiver(this); // the stream may outlive this view
    this._buffer.dispose();
    this._toolbar.dispose();
    this.toolbar.dispose();
    this._list.dispose();
    if (this._frame !== 0) {
      cancelAnimationFrame(this._frame);
    }
    window.clearTimeout(this._later);
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
   * Offer this worker in the worker filter (whether or not it logged yet).
   */
  addWorker(worker: string): void {
    this._toolbar.addWorker(worker);
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

  /**
   * Lines the server skipped (the view fell behind) and that could not be
   * read after: said in their place, never a silent hole.
   */
  private _showGap(gap: IGap): void {
    if (gap.filled) {
      return; // its lines arrived in their place
    }
    const all = this._buffer.all;
    this._buffer.append([
      {
        seq: gap.upto,
        time: all[all.length - 1]?.time ?? Date.now() / 1000,
        level: 'WARNING',
        source: 'dask-observe',
        worker: null,
        logger: 'dask-observe',
        message:
          'Lines are missing here: the view fell behind and they could not ' +
          'be read (reopen the view, or read the run with dask-observe logs).',
        task: null,
        fields: null
      }
    ]);
  }

  private _showState(state: ConnectionState): void {
    this._state.textContent = stateWords(state);
    this._state.dataset.state = state;
    this._schedule(); // what the empty list means may have changed
  }

  private _schedule(): void {
    if (this._frame !== 0 || this.isDisposed) {
      return;
    }
    if (this._replaying) {
      const wait = this._drawn + ARRIVALS_DRAW_MS - performance.now();
      if (wait > 0) {
        if (this._later === 0) {
          this._later = window.setTimeout(() => {
            this._later = 0;
            this._schedule();
          }, wait);
        }
        return;
      }
    }
    if (this._later !== 0) {
      window.clearTimeout(this._later); // drawn now, with what it waited for
      this._later = 0;
    }
    this._frame = requestAnimationFrame(() => {
      this._frame = 0;
      this._drawn = performance.now();
      this._draw();
    });
  }

  private _draw(): void {
    const buffer = this._buffer;
    this._toolbar.showCount(
      buffer.shown.length,
      buffer.all.length,
      buffer.filtering
    );
    this._list.draw(buffer.shown, this._gone, this._toolbar.follow);
    const target = this._stream.target;
    const run = target?.run !== undefined;
    // From near the end (the server left earlier rows out): an empty list
    // says nothing of what came before.
    const tail = this._stream.tail;
    const empty =
      buffer.all.length === 0
        ? target === null
          ? NOTHING_FOLLOWED
          : run
            ? tail
              ? 'No lines near the run’s end.'
              : 'No lines in this run.'
            : tail
              ? 'No recent lines.'
              : 'No lines yet.'
        : buffer.shown.length === 0 && buffer.filtering === null
          ? 'No line passes the filters.'
          : '';
    this._empty.textContent = empty;
    this._empty.hidden = empty === '';
    this._tail.hidden = !tail;
    // A cluster's tab starts near the end too: only a run's has them all.
    this._tail.textContent = !run
      ? 'The cluster’s newest lines.'
      : this._openInTab
        ? 'The run’s last lines: open in a tab for all of them.'
        : 'The run’s last lines.';
  }

  private _buffer: LogBuffer;
  private _empty: HTMLDivElement;
  private _openInTab: boolean;
  private _tail: HTMLDivElement;
  private _frame = 0;
  private _replaying = false;
  private _drawn = -Infinity;
  private _later = 0;
  private _gone: ReadonlySet<string> = new Set();
  private _list: LogList;
  private _state: HTMLSpanElement;
  private _stream: StoreStream;
  private _subject: HTMLSpanElement;
  private _toolbar: LogsToolbar;
}

/**
 * The namespace for `LogsView` statics.
 */
export namespace LogsView {
  export interface IOptions {
    /**
     * Where the lines come from.
     */
    stream: StoreStream;
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
