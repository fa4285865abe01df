import { Poll } from '@lumino/polling';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

/**
 * Run cards the panel shows at first, and adds with each "Show more": a few
 * screenfuls of the sidebar. A page of 100 took ~45 ms of the main thread
 * more than one of 25 to open the panel, ~25 ms more to switch runs (the
 * sidebar's layout and paint; benchmarks/panel_open.py).
 */
export const RUNS_PAGE = 25;

/**
 * A list the server holds (the clusters, the runs), fetched every `interval`
 * milliseconds while it is active and the page is visible, and told when it
 * changed. Views draw it; the panel follows what it says. Owning the polling
 * here, not in a view, lets the panel stop it while it is hidden.
 */
export class PolledList<T> {
  constructor(options: PolledList.IOptions<T>) {
    this._fetch = options.fetch;
    this._signature = options.signature ?? (items => JSON.stringify(items));
    this._active = options.active ?? true;
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: {
        interval: options.interval ?? 5000,
        backoff: true,
        max: 60 * 1000
      },
      name: options.name,
      standby: () => !this._active || 'when-hidden'
    });
  }

  /**
   * The items, whenever they differ from those told last.
   */
  get changed(): ISignal<this, readonly T[]> {
    return this._changed;
  }

  /**
   * Why a refresh failed (polling backs off and goes on).
   */
  get failed(): ISignal<this, unknown> {
    return this._failed;
  }

  /**
   * Whether a refresh has succeeded yet (before, `items` is empty because
   * nothing is known, not because there is nothing).
   */
  get known(): boolean {
    return this._known;
  }

  /**
   * The items of the last successful refresh.
   */
  get items(): readonly T[] {
    return this._items;
  }

  /**
   * Whether it polls; set false while nothing shows it. Becoming active
   * refreshes at once.
   */
  get active(): boolean {
    return this._active;
  }

  set active(value: boolean) {
    if (value === this._active || this.isDisposed) {
      return;
    }
    this._active = value;
    if (value) {
      void this._poll.refresh();
    }
  }

  /**
   * Milliseconds between refreshes.
   */
  get interval(): number {
    return this._poll.frequency.interval;
  }

  set interval(ms: number) {
    this._poll.frequency = { ...this._poll.frequency, interval: ms };
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * Fetch the items now; tell them when they changed.
   */
  async refresh(): Promise<void> {
    let items: T[];
    try {
      items = await this._fetch();
    } catch (reason) {
      this._told = ''; // told again on the next success
      this._failed.emit(reason);
      throw reason;
    }
    this._known = true;
    const signature = this._signature(items);
    if (signature !== this._told && !this.isDisposed) {
      this._told = signature;
      this._items = items;
      this._changed.emit(items);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _active: boolean;
  private _changed = new Signal<this, readonly T[]>(this);
  private _failed = new Signal<this, unknown>(this);
  private _fetch: () => Promise<T[]>;
  private _items: readonly T[] = [];
  private _known = false;
  private _poll: Poll;
  private _signature: (items: T[]) => string;
  private _told = '';
}

/**
 * The namespace for `PolledList` statics.
 */
export namespace PolledList {
  export interface IOptions<T> {
    /**
     * Read the list from the server.
     */
    fetch: () => Promise<T[]>;
    /**
     * A name for the poll (seen in debugging).
     */
    name: string;
    /**
     * Milliseconds between refreshes; 5 s by default.
     */
    interval?: number;
    /**
     * Whether to poll from the start; true by default.
     */
    active?: boolean;
    /**
     * What must differ for the items to count as changed (all of them, as
     * JSON, by default).
     */
    signature?: (items: T[]) => string;
  }
}

/**
 * A list of runs the server answers a page at a time: the newest `limit`,
 * and how many there are (`total`).
 */
export abstract class PagedList<T> extends PolledList<T> {
  /**
   * How many of the newest runs are fetched (what the panel shows).
   */
  get limit(): number {
    return this._limit;
  }

  /**
   * Fetch more (or fewer) of the newest runs, at once.
   */
  set limit(value: number) {
    if (value !== this._limit) {
      this._limit = value;
      void this.refresh().catch(() => undefined); // failed: told, polled again
    }
  }

  /**
   * How many runs there are, as of the last refresh.
   */
  get total(): number {
    return this._total;
  }

  protected _limit = RUNS_PAGE;
  protected _total = 0;
}
