import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  fetchArchive,
  fetchClusters,
  fetchHistory,
  fetchRuns,
  IArchivePage,
  IArchiveRun,
  ICluster,
  IHistory,
  IRun,
  IRunsPage
} from './api';
import { StreamConnection } from './connection';
import { IFlag, StoreStream } from './stream';

/**
 * Run cards the panel shows at first, and adds with each "Show more".
 */
export const RUNS_PAGE = 100;

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
 * The clusters that recorders watch, most recently seen first.
 */
export class ClusterModel extends PolledList<ICluster> {
  constructor(options: Partial<PolledList.IOptions<ICluster>> = {}) {
    super({
      fetch: fetchClusters,
      name: 'dask-observe:clusters',
      // Not last_seen, which a live cluster renews on every refresh: its
      // card (and the dashboard buttons under the pointer) would be redrawn.
      signature: clusters =>
        JSON.stringify(
          clusters.map(c => [
            c.id,
            c.address,
            c.dashboard,
            c.alive,
            c.silent_since,
            c.notebooks
          ])
        ),
      ...options
    });
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

/**
 * The runs in the store, newest first.
 */
export class RunsModel extends PagedList<IRun> {
  constructor(options: RunsModel.IOptions = {}) {
    const fetchPage = options.fetchPage ?? fetchRuns;
    super({
      fetch: async () => {
        const page = await fetchPage(this._limit);
        this._total = page.total;
        return page.runs;
      },
      // A run pruned beyond the page changes the count alone.
      signature: runs => JSON.stringify([this._total, runs]),
      name: 'dask-observe:runs',
      ...options
    });
  }
}

/**
 * The namespace for `RunsModel` statics.
 */
export namespace RunsModel {
  export interface IOptions extends Partial<PolledList.IOptions<IRun>> {
    /**
     * Fetches the newest runs (the server's, by default).
     */
    fetchPage?: (limit: number) => Promise<IRunsPage>;
  }
}

/**
 * The runs of the team's archive, newest first: listed from object storage,
 * so polled less often than the local runs.
 */
export class TeamModel extends PagedList<IArchiveRun> {
  constructor(options: TeamModel.IOptions = {}) {
    const fetchPage = options.fetchPage ?? fetchArchive;
    super({
      fetch: async () => {
        const page = await fetchPage(this._limit);
        this.archive = page.archive;
        this.skipped = page.skipped ?? 0;
        this._total = page.total ?? page.runs.length;
        return page.runs;
      },
      // A run pruned beyond the page changes the count alone.
      signature: runs => JSON.stringify([this._total, this.skipped, runs]),
      name: 'dask-observe:team',
      interval: 30 * 1000,
      ...options
    });
  }

  /**
   * Where the archive is; null where none is set (or not fetched yet).
   */
  archive: string | null = null;

  /**
   * Entries of the archive its last listing skipped as not valid runs.
   */
  skipped = 0;
}

/**
 * The namespace for `TeamModel` statics.
 */
export namespace TeamModel {
  export interface IOptions extends Partial<PolledList.IOptions<IArchiveRun>> {
    /**
     * Fetches the archive's newest runs (the server's, by default).
     */
    fetchPage?: (limit: number) => Promise<IArchivePage>;
  }
}

/**
 * The flags of one run, as the server judges them (again while it runs: it
 * sends them whole each time they change).
 */
export class FlagsModel implements IDisposable {
  /**
   * @param connection - the socket to share (the panel's), else one of its own.
   */
  constructor(connection?: StreamConnection) {
    this._stream = new StoreStream(['flags'], connection);
    this._stream.flags.connect((_, flags) => {
      this._flags = flags;
      this._changed.emit();
    });
  }

  /**
   * Told when the run or its flags changed.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * The run whose flags these are (null: none yet).
   */
  get runId(): number | null {
    return this._runId;
  }

  /**
   * Its flags, as the server sent them last.
   */
  get flags(): readonly IFlag[] {
    return this._flags;
  }

  get isDisposed(): boolean {
    return this._stream.isDisposed;
  }

  /**
   * Follow the flags of that run (forgetting the previous run's).
   */
  follow(runId: number): void {
    this._runId = runId;
    this._flags = [];
    this._changed.emit();
    this._stream.follow({ run: runId });
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stream.dispose();
    Signal.clearData(this);
  }

  private _changed = new Signal<this, void>(this);
  private _flags: readonly IFlag[] = [];
  private _runId: number | null = null;
  private _stream: StoreStream;

  /**
   * The subscription the flags come by (its state, why it failed).
   */
  get stream(): StoreStream {
    return this._stream;
  }
}

/**
 * The history of one run's name: read when asked for, and again when asked
 * with `force` (a run of the name came or finished).
 */
export class HistoryModel implements IDisposable {
  /**
   * Told when a read starts and when it ends (`history` or `error`).
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * The run whose name's history is wanted (null: none yet).
   */
  get runId(): number | null {
    return this._runId;
  }

  /**
   * The history of that run's name, once read.
   */
  get history(): IHistory | null {
    return this._history;
  }

  /**
   * Whether a read is under way.
   */
  get reading(): boolean {
    return this._reading;
  }

  /**
   * Why the last read failed, or null.
   */
  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Read the history of that run's name; again when `force`, even if read.
   */
  async show(runId: number, force = false): Promise<void> {
    if (runId === this._runId && !force) {
      return;
    }
    this._runId = runId;
    this._reading = true;
    this._changed.emit();
    let history: IHistory;
    try {
      history = await fetchHistory(runId);
    } catch (reason) {
      if (runId === this._runId && !this._isDisposed) {
        this._reading = false;
        this._error = String(reason);
        this._changed.emit();
      }
      return;
    }
    // An answer for a run asked for before the latest is not wanted.
    if (runId === this._runId && !this._isDisposed) {
      this._reading = false;
      this._history = history;
      this._error = null;
      this._changed.emit();
    }
  }

  /**
   * Pin the history to that run's name (null: the newest run's), and show it
   * from the runs listed now.
   */
  pin(runId: number | null, runs: readonly IRun[]): void {
    this._pinned = runId;
    this.follow(runs);
  }

  /**
   * Read the history again when the runs of its name change (a new one, one
   * that finished): of the pinned run, else of the newest run.
   */
  follow(runs: readonly IRun[]): void {
    const pinned = runs.find(run => run.id === this._pinned);
    if (pinned === undefined && this._pinned !== null) {
      return; // older than the runs fetched now: its history stays shown
    }
    const shown = pinned ?? runs[0] ?? null;
    if (shown === null) {
      return;
    }
    const signature = JSON.stringify([
      shown.id,
      runs.filter(run => run.name === shown.name).map(r => [r.id, r.status])
    ]);
    if (signature !== this._followed) {
      this._followed = signature;
      void this.show(shown.id, true);
    }
  }

  dispose(): void {
    this._isDisposed = true;
    Signal.clearData(this);
  }

  private _changed = new Signal<this, void>(this);
  private _error: string | null = null;
  private _followed = '';
  private _history: IHistory | null = null;
  private _pinned: number | null = null;
  private _isDisposed = false;
  private _reading = false;
  private _runId: number | null = null;
}
