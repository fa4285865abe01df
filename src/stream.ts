import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { IEvent, IFlag, ILogLine, IMetric, requestAPI } from './api';

export type { IEvent, IFlag, ILogLine, IMetric };

export type StreamKind = 'logs' | 'flags' | 'metrics' | 'events';

/**
 * Rows the server skipped for a client that fell behind (sequence numbers
 * above `after`, at most `upto`): `filled` when they were read over REST and
 * delivered in their place, false when they could not be (a hole).
 */
export interface IGap {
  after: number;
  upto: number;
  filled: boolean;
}

/**
 * Rows of some kinds, as a stream batch (or a gap's REST page) holds them.
 */
interface IRows {
  last: number;
  logs?: ILogLine[];
  metrics?: IMetric[];
  events?: IEvent[];
}

/**
 * What the server sent, waiting its turn to be delivered.
 */
type Queued =
  | ({ type: 'batch' } & IRows)
  | { type: 'gap'; after: number; upto: number }
  | { type: 'flags'; flags: IFlag[] };

/**
 * What a subscription follows: a run, or a cluster by its id.
 */
export interface ITarget {
  run?: number;
  cluster?: string;
}

export type ConnectionState = 'connecting' | 'open' | 'reconnecting' | 'closed';

/**
 * The `dask-observe/api/stream` websocket: subscribes to log lines, remembers
 * the last sequence number it received, and after a dropped connection (the
 * server restarted, the network blinked) reconnects by itself and resumes
 * exactly there.
 *
 * When the server skipped rows for a client that fell behind (a `gap`), they
 * are read over REST and delivered in their place before anything after
 * them, so a view misses no line; rows that cannot be read are told (`gaps`).
 */
export class StoreStream {
  /**
   * @param kinds - what to subscribe to: log lines by default; flags are sent
   * for runs only, whole, each time they change.
   */
  constructor(kinds: StreamKind[] = ['logs']) {
    this._kinds = kinds;
  }

  /**
   * Metric samples as they arrive, in store order.
   */
  get metrics(): ISignal<this, IMetric[]> {
    return this._metrics;
  }

  /**
   * Lifecycle events as they arrive, in store order.
   */
  get events(): ISignal<this, IEvent[]> {
    return this._events;
  }

  /**
   * Told before a new `follow` replaces what was followed: views start over.
   */
  get reset(): ISignal<this, ITarget> {
    return this._reset;
  }

  /**
   * What is followed now, if anything.
   */
  get target(): ITarget | null {
    return this._target;
  }

  /**
   * A run's flags, whenever they change.
   */
  get flags(): ISignal<this, IFlag[]> {
    return this._flags;
  }

  /**
   * Lines as they arrive, in store order.
   */
  get lines(): ISignal<this, ILogLine[]> {
    return this._lines;
  }

  /**
   * Each gap the server made, once its rows were delivered (or could not be).
   */
  get gaps(): ISignal<this, IGap> {
    return this._gaps;
  }

  /**
   * Why the server ended the subscription (it was refused or failed).
   */
  get failed(): ISignal<this, string> {
    return this._failed;
  }

  /**
   * The connection state, as it changes.
   */
  get stateChanged(): ISignal<this, ConnectionState> {
    return this._stateChanged;
  }

  get state(): ConnectionState {
    return this._state;
  }

  /**
   * Follow ``target`` from sequence number ``after`` (0: from its start; -N:
   * about N rows before its end), or from ``since`` seconds ago when given.
   */
  follow(target: ITarget, after = 0, since?: number): void {
    if (this._isDisposed) {
      return;
    }
    this._generation += 1; // what is queued or being filled is not wanted now
    this._queue = [];
    this._target = target;
    this._since = since;
    this._reset.emit(target);
    this._last = after;
    this._retries = 0;
    this._connect();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Stop following, close the connection and let go of every listener.
   */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._generation += 1;
    this._queue = [];
    this._target = null;
    window.clearTimeout(this._timer);
    this._socket?.close();
    this._socket = null;
    this._setState('closed');
    Signal.clearData(this);
  }

  private _connect(): void {
    window.clearTimeout(this._timer);
    this._socket?.close();
    const settings = ServerConnection.makeSettings();
    let url = URLExt.join(settings.wsUrl, 'dask-observe', 'api', 'stream');
    if (settings.appendToken && settings.token) {
      url += `?token=${encodeURIComponent(settings.token)}`;
    }
    const socket = new settings.WebSocket(url);
    this._socket = socket;
    this._setState(this._retries > 0 ? 'reconnecting' : 'connecting');
    socket.onopen = () => {
      socket.send(
        JSON.stringify({
          type: 'subscribe',
          kinds: this._kinds,
          after: this._last,
          ...(this._since === undefined ? {} : { since: this._since }),
          ...this._target
        })
      );
    };
    socket.onmessage = event => {
      // A replaced socket's frames may still be queued in the browser: taken
      // in, they moved the resume point past rows the new subscription would
      // have sent again after follow() cleared the view (a likely way the
      // first log line went missing when the panel switched to the live
      // cluster, in full suites only).
      if (this._socket === socket) {
        this._receive(String(event.data));
      }
    };
    socket.onclose = () => {
      if (this._socket !== socket || this._target === null) {
        return; // replaced or disposed: nothing to resume
      }
      // 0.5 s, 1 s, 2 s, ... at most 10 s between attempts.
      const delay = Math.min(10_000, 500 * 2 ** this._retries);
      this._retries += 1;
      this._setState('reconnecting');
      this._timer = window.setTimeout(() => this._connect(), delay);
    };
  }

  private _receive(text: string): void {
    const message = JSON.parse(text);
    if (message.type === 'subscribed') {
      this._retries = 0;
      this._setState('open');
    } else if (message.type === 'error') {
      this._failed.emit(String(message.message));
    } else if (['batch', 'gap', 'flags'].includes(message.type)) {
      // A reconnection resumes after what arrived, delivered or queued.
      if (message.type === 'batch') {
        this._last = message.last;
      } else if (message.type === 'gap') {
        this._last = message.upto;
      }
      this._queue.push(message as Queued);
      void this._pump();
    }
  }

  /**
   * Deliver what arrived in order, a gap's rows (read over REST) in its place.
   */
  private async _pump(): Promise<void> {
    if (this._pumping) {
      return;
    }
    this._pumping = true;
    const generation = this._generation;
    try {
      while (this._queue.length > 0 && generation === this._generation) {
        const message = this._queue.shift() as Queued;
        if (message.type === 'gap') {
          await this._fill(message.after, message.upto, generation);
        } else if (message.type === 'batch') {
          this._deliver(message);
        } else {
          this._flags.emit(message.flags);
        }
      }
    } finally {
      this._pumping = false;
    }
    if (this._queue.length > 0) {
      void this._pump(); // queued for a newer target while this one filled
    }
  }

  /**
   * Read the rows of a gap over REST, a batch at a time, and deliver them.
   */
  private async _fill(
    after: number,
    upto: number,
    generation: number
  ): Promise<void> {
    const target = this._target;
    let from = after;
    let filled = true;
    try {
      while (from < upto && target !== null) {
        const query = new URLSearchParams({
          subscribe: JSON.stringify({
            type: 'subscribe',
            kinds: this._kinds,
            after: from,
            ...target
          }),
          upto: String(upto)
        });
        const rows = await requestAPI<IRows>(`stream/rows?${query}`);
        if (generation !== this._generation) {
          return;
        }
        this._deliver(rows);
        if (rows.last <= from) {
          break; // nothing further up to the gap's end
        }
        from = rows.last;
      }
    } catch (reason) {
      console.warn('dask-observe: could not read the rows of a gap', reason);
      filled = false;
    }
    if (generation === this._generation) {
      this._gaps.emit({ after, upto, filled });
    }
  }

  private _deliver(rows: IRows): void {
    if (rows.logs?.length) {
      this._lines.emit(rows.logs);
    }
    if (rows.metrics?.length) {
      this._metrics.emit(rows.metrics);
    }
    if (rows.events?.length) {
      this._events.emit(rows.events);
    }
  }

  private _setState(state: ConnectionState): void {
    if (state !== this._state) {
      this._state = state;
      this._stateChanged.emit(state);
    }
  }

  private _events = new Signal<this, IEvent[]>(this);
  private _failed = new Signal<this, string>(this);
  private _flags = new Signal<this, IFlag[]>(this);
  private _gaps = new Signal<this, IGap>(this);
  private _generation = 0;
  private _isDisposed = false;
  private _kinds: StreamKind[];
  private _metrics = new Signal<this, IMetric[]>(this);
  private _reset = new Signal<this, ITarget>(this);
  private _last = 0;
  private _lines = new Signal<this, ILogLine[]>(this);
  private _pumping = false;
  private _queue: Queued[] = [];
  private _retries = 0;
  private _since: number | undefined = undefined;
  private _socket: WebSocket | null = null;
  private _state: ConnectionState = 'closed';
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _target: ITarget | null = null;
  private _timer = 0;
}
