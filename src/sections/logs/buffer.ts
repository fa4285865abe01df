import type { IDisposable } from '@lumino/disposable';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { ILogLine } from '../../data/api';

/**
 * Rows a live view starts with: about the newest so many of its cluster.
 */
export const LOG_TAIL = 20_000;

/**
 * About how many rows of a run the side panel replays, from its end: a
 * replay of a 100,000-line run from its start took 1.2-1.6 s of the page's
 * main thread (benchmarks/panel_open.py). Its tab shows every line. One
 * batch of the server's (BATCH_ROWS in server/subscriptions.py), drawn
 * once: 5,000 came in three, each drawn as it came.
 */
export const RUN_TAIL = 2_000;

/**
 * Which lines a view shows.
 */
export type LineFilter = (line: ILogLine) => boolean;

/**
 * The filter that passes every line: set, it shows the whole buffer at once
 * (a copy of it), not a slice at a time (a million lines took 115 ms to show
 * again when a filter was cleared).
 */
export const SHOW_ALL: LineFilter = () => true;

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
  matches: LineFilter;
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
 * The log lines a view holds, oldest first, and those that pass its filter.
 *
 * Keeps at most `maxLines` (the oldest go first). A new filter is applied to
 * the whole buffer a slice at a time; until it is done, `shown` is the
 * previous result and `filtering` says how far it got. No DOM: views draw it.
 */
export class LogBuffer implements IDisposable {
  constructor(maxLines = 100_000) {
    this._maxLines = maxLines;
    this._nextSlice.port1.onmessage = event => {
      if (event.data === this._refiltering?.id) {
        this._filterSlice();
      }
    };
  }

  /**
   * Told when the lines or the shown lines changed.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Every line held, oldest first.
   */
  get all(): readonly ILogLine[] {
    return this._all;
  }

  /**
   * The lines that pass the filter, oldest first.
   */
  get shown(): readonly ILogLine[] {
    return this._shown;
  }

  /**
   * How far a filter under way got (0 to 1), or null when none is.
   */
  get filtering(): number | null {
    const job = this._refiltering;
    return job === null ? null : job.next / Math.max(1, this._all.length);
  }

  /**
   * Lines kept at most; the oldest go first.
   */
  get maxLines(): number {
    return this._maxLines;
  }

  set maxLines(value: number) {
    this._maxLines = value;
    this.append([]);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Add lines after the newest (dropping the oldest beyond `maxLines`).
   */
  append(lines: readonly ILogLine[]): void {
    Private.extend(this._all, lines);
    const job = this._refiltering;
    if (job === null) {
      Private.extend(this._shown, lines.filter(this._matches));
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
    this._changed.emit();
  }

  /**
   * Forget every line (the stream starts over).
   */
  clear(): void {
    this._refiltering = null;
    this._all = [];
    this._shown = [];
    this._changed.emit();
  }

  /**
   * Show the lines that pass `matches`: applied to the whole buffer in
   * slices, and to each line that arrives.
   */
  setFilter(matches: LineFilter): void {
    this._matches = matches;
    if (matches === SHOW_ALL) {
      this._refiltering = null; // a slice already posted finds it gone
      this._shown = this._all.slice();
      this._changed.emit();
      return;
    }
    this._refiltering = {
      id: ++this._refilters,
      matches,
      next: 0,
      shown: []
    };
    this._filterSlice();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._refiltering = null; // a slice already posted for it finds it gone
    this._nextSlice.port1.close();
    this._nextSlice.port2.close();
    Signal.clearData(this);
  }

  /**
   * Filter the buffer for about FILTER_SLICE_MS, then yield to the page and
   * go on; `shown` changes once the whole buffer is done.
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
    this._changed.emit();
  }

  private _all: ILogLine[] = [];
  private _changed = new Signal<this, void>(this);
  private _isDisposed = false;
  private _matches: LineFilter = SHOW_ALL;
  private _maxLines: number;
  private _nextSlice = new MessageChannel();
  private _refiltering: IRefilter | null = null;
  private _refilters = 0;
  private _shown: ILogLine[] = [];
}

namespace Private {
  /**
   * Remove, in place, the leading lines numbered up to `seq` (they left the
   * buffer).
   */
  /**
   * Add `more` to the end of `lines`. Not `push(...more)`: an argument per
   * line overflows the call stack past some 100,000 lines (the stream sends
   * at most 2,000 a batch, but a buffer holds up to a million: nothing here
   * should depend on who calls with how many).
   */
  export function extend(lines: ILogLine[], more: readonly ILogLine[]): void {
    for (const line of more) {
      lines.push(line);
    }
  }

  export function dropUpTo(lines: ILogLine[], seq: number): void {
    const keep = lines.findIndex(line => line.seq > seq);
    lines.splice(0, keep < 0 ? lines.length : keep);
  }
}
