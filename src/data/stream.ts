import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { IEvent, IFlag, ILogLine, IMetric } from './api';
import { requestAPI } from './api';
import type { IChannel } from './connection';
import { StreamConnection } from './connection';

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
  /**
   * More rows follow at once (a replay under way).
   */
  more?: boolean;
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
 * A subscription to the `dask-observe/api/stream` websocket: follows a run or
 * a cluster, remembers the last sequence number it received, and after a
 * dropped connection (the server restarted, the network blinked) subscribes
 * again as the connection reconnects, and resumes exactly there. Several
 * share one socket (a `StreamConnection`: the panel's), or one has its own.
 *
 * When the server skipped rows for a client that fell behind (a `gap`), they
 * are read over REST and delivered in their place before anything after
 * them, so a view misses no line; rows that cannot be read are told (`gaps`).
 */
export class StoreStream implements IChannel {
  /**
   * @param kinds - what to subscribe to: log lines by default; flags are sent
   * for runs only, whole, each time they change.
   */
  constructor(kinds: StreamKind[] = ['logs'], connection?: StreamConnection) {
    this._kinds = kinds;
    // A connection of its own, unless it shares one (the panel's streams do).
    this._ownsConnection = connection === undefined;
    this._connection = connection ?? new StreamConnection();
    this._name = Private.name(kinds);
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
    this._tail = false;
    this._reset.emit(target);
    this._last = after;
    this._setState('connecting');
    // A new id for each subscription: the old one's frames still on their
    // way are then not taken for the new one's.
    const previous = this._id;
    this._id = `${this._name}.${this._generation}`;
    this._connection.follow(this._id, this, previous ?? undefined);
  }

  /**
   * Whether it follows a run from near its end (``follow`` with -N): the
   * server left the run's earlier rows out.
   */
  get tail(): boolean {
    return this._tail;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Whether the rows being delivered said more follow at once (a replay
   * under way): a view may wait for them before it draws.
   */
  get more(): boolean {
    return this._more;
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
    if (this._id !== null) {
      this._connection.leave(this._id);
    }
    if (this._ownsConnection) {
      this._connection.dispose();
    }
    this._setState('closed');
    Signal.clearData(this);
  }

  /**
   * The subscribe message, from where it stands now (IChannel).
   */
  subscription(): Record<string, unknown> | null {
    if (this._target === null) {
      return null;
    }
    return {
      type: 'subscribe',
      kinds: this._kinds,
      after: this._last,
      ...(this._since === undefined ? {} : { since: this._since }),
      ...this._target
    };
  }

  /**
   * The connection dropped: it reconnects and subscribes again (IChannel).
   */
  dropped(): void {
    this._setState('reconnecting');
  }

  /**
   * A message of its subscription (IChannel).
   */
  receive(message: Record<string, unknown>): void {
    if (message.type === 'subscribed') {
      this._connection.resetBackoff();
      // (A resubscription after a drop resumes: it does not say it again.)
      this._tail = this._tail || message.tail === true;
      this._setState('open');
    } else if (message.type === 'error') {
      this._failed.emit(String(message.message));
    } else if (['batch', 'gap', 'flags'].includes(String(message.type))) {
      // A reconnection resumes after what arrived, delivered or queued.
      if (message.type === 'batch') {
        this._last = Number(message.last);
      } else if (message.type === 'gap') {
        this._last = Number(message.upto);
      }
      this._queue.push(message as unknown as Queued);
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
    this._more = rows.more === true;
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

  private _more = false;
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
  private _tail = false;
  private _lines = new Signal<this, ILogLine[]>(this);
  private _pumping = false;
  private _queue: Queued[] = [];
  private _connection: StreamConnection;
  private _id: string | null = null;
  private _name: string;
  private _ownsConnection: boolean;
  private _since: number | undefined = undefined;
  private _state: ConnectionState = 'closed';
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _target: ITarget | null = null;
}

namespace Private {
  /**
   * Streams made so far: each takes a name of its own on a shared connection.
   */
  let made = 0;

  export function name(kinds: StreamKind[]): string {
    made += 1;
    return `${kinds.join('+')}-${made}`;
  }
}
