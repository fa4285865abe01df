import type { IDisposable } from '@lumino/disposable';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { IEvent, IMetric, StoreStream } from '../../data/stream';
import type { IGoneWorkers } from '../../tokens';

/**
 * The samples a view keeps: names it draws, per worker and for the cluster.
 */
const KEPT = new Set([
  'memory_managed',
  'memory_unmanaged',
  'memory_spilled',
  'memory_limit',
  'nthreads',
  'workers',
  'cpu',
  'tasks_processing',
  'net_read_bps',
  'net_write_bps',
  'net_bps'
]);

/**
 * The key of the cluster-wide series (their rows have no worker).
 */
export const CLUSTER = '';

/**
 * One sample: metric name -> value.
 */
export type Sample = Map<string, number>;

/**
 * The samples of one worker (or of the cluster), oldest first.
 */
export class Series {
  times: number[] = [];
  samples: Sample[] = [];

  /**
   * The sample taken at `time`, created when it is the newest. A new sample
   * starts from the one before: the capture sends a worker's values when
   * they change (its task count between heartbeats), and each holds until
   * the next.
   */
  at(time: number): Sample {
    const last = this.times.length - 1;
    if (last >= 0 && this.times[last] === time) {
      return this.samples[last];
    }
    const sample: Sample = new Map(this.latest());
    this.times.push(time);
    this.samples.push(sample);
    return sample;
  }

  latest(): Sample | undefined {
    return this.samples[this.samples.length - 1];
  }

  /**
   * Forget the samples before `oldest` (in one splice, once enough are stale).
   */
  trim(oldest: number): void {
    let stale = 0;
    while (stale < this.times.length && this.times[stale] < oldest) {
      stale++;
    }
    if (stale > 32 || stale === this.times.length) {
      this.times.splice(0, stale);
      this.samples.splice(0, stale);
    }
  }
}

/**
 * The samples and workers of what a metrics subscription follows: per worker
 * (and for the cluster) the last `windowSeconds` of samples, and the workers
 * that have left. Views draw it (``MetricsView``); others follow who left
 * (the logs mark those workers' lines).
 */
export class MetricsModel implements IDisposable {
  constructor(options: MetricsModel.IOptions) {
    this.stream = options.stream;
    this.windowSeconds = options.windowSeconds ?? 300;
    this.stream.metrics.connect((_, rows) => this._addMetrics(rows), this);
    this.stream.events.connect((_, rows) => this._addEvents(rows), this);
    this.stream.reset.connect(() => this._clear(), this);
  }

  /**
   * The subscription the samples come by.
   */
  readonly stream: StoreStream;

  /**
   * Seconds of samples kept, back from the newest sample.
   */
  windowSeconds: number;

  /**
   * Told when samples or workers changed: `true` when a view should redraw
   * at once (a worker left, the subject changed), else at its own pace.
   */
  get changed(): ISignal<this, boolean> {
    return this._changed;
  }

  /**
   * Workers that have left the cluster, by address.
   */
  get gone(): ReadonlySet<string> {
    return this._gone;
  }

  /**
   * Told when a worker leaves (or comes back).
   */
  get goneChanged(): ISignal<this, ReadonlySet<string>> {
    return this._goneChanged;
  }

  /**
   * Its workers that left, as the token's views that mark them read it (a
   * logs tab of the same cluster or run).
   */
  get goneWorkers(): IGoneWorkers {
    const gone = (): ReadonlySet<string> => this._gone;
    return {
      get current() {
        return gone();
      },
      changed: this._goneChanged
    };
  }

  /**
   * Told of each worker the first time a sample of it arrives.
   */
  get workerAdded(): ISignal<this, string> {
    return this._workerAdded;
  }

  /**
   * The time of the newest sample (seconds since the epoch).
   */
  get newest(): number {
    return this._newest;
  }

  /**
   * The workers with samples in the window, by address.
   */
  workers(): string[] {
    return [...this._series.keys()].filter(k => k !== CLUSTER).sort();
  }

  /**
   * The samples of a worker, or of the whole cluster (`null`).
   */
  series(worker: string | null): Series | undefined {
    return this._series.get(worker ?? CLUSTER);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    this._isDisposed = true;
    Signal.clearData(this);
  }

  private _clear(): void {
    this._series.clear();
    this._gone.clear();
    this._goneChanged.emit(this._gone);
    this._changed.emit(true);
  }
  private _addMetrics(rows: IMetric[]): void {
    for (const row of rows) {
      if (!KEPT.has(row.name)) {
        continue;
      }
      const key = row.worker ?? CLUSTER;
      let series = this._series.get(key);
      if (!series) {
        series = new Series();
        this._series.set(key, series);
        if (row.worker) {
          this._workerAdded.emit(row.worker);
        }
      }
      series.at(row.time).set(row.name, row.value);
      this._newest = Math.max(this._newest, row.time);
    }
    const oldest = this._newest - this.windowSeconds;
    for (const [key, series] of this._series) {
      series.trim(oldest);
      if (series.times.length === 0 && key !== CLUSTER) {
        // Left the window (a worker long gone): no longer listed.
        this._series.delete(key);
        this._gone.delete(key);
      }
    }
    this._changed.emit(false);
  }
  private _addEvents(rows: IEvent[]): void {
    let changed = false;
    for (const event of rows) {
      if (!event.worker) {
        continue;
      }
      if (event.kind === 'worker-removed') {
        changed = !this._gone.has(event.worker) || changed;
        this._gone.add(event.worker);
      } else if (event.kind === 'worker-added') {
        changed = this._gone.delete(event.worker) || changed;
      }
    }
    if (changed) {
      this._goneChanged.emit(this._gone);
      this._changed.emit(true);
    }
  }
  private _changed = new Signal<this, boolean>(this);
  private _gone = new Set<string>();
  private _goneChanged = new Signal<this, ReadonlySet<string>>(this);
  private _isDisposed = false;
  private _newest = 0;
  private _series = new Map<string, Series>();
  private _workerAdded = new Signal<this, string>(this);
}

/**
 * The namespace for `MetricsModel` statics.
 */
export namespace MetricsModel {
  export interface IOptions {
    /**
     * A subscription to metrics and events.
     */
    stream: StoreStream;
    /**
     * Seconds of samples kept (default 300).
     */
    windowSeconds?: number;
  }
}
