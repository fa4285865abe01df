import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

/**
 * A log line as the stream sends it.
 */
export interface ILogLine {
  seq: number;
  time: number;
  level: string;
  source: string;
  worker: string | null;
  logger: string;
  message: string;
}

/**
 * A flag as the stream sends it.
 */
export interface IFlag {
  time: number;
  kind: string;
  severity: 'info' | 'warning' | 'error';
  worker: string | null;
  message: string;
  advice: string;
  evidence: { time: number; worker: string | null; text: string }[];
}

/**
 * A metric sample as the stream sends it: one value of one worker (or of the
 * whole cluster when `worker` is null).
 */
export interface IMetric {
  seq: number;
  time: number;
  worker: string | null;
  name: string;
  value: number;
}

/**
 * A lifecycle event as the stream sends it (worker-added, worker-removed, ...).
 */
export interface IEvent {
  seq: number;
  time: number;
  kind: string;
  worker: string | null;
  data: Record<string, unknown>;
}

export type StreamKind = 'logs' | 'flags' | 'metrics' | 'events';

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
 */
export class LogStream {
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
    this._target = target;
    this._since = since;
    this._reset.emit(target);
    this._last = after;
    this._retries = 0;
    this._connect();
  }

  /**
   * Stop following and close the connection.
   */
  dispose(): void {
    this._target = null;
    window.clearTimeout(this._timer);
    this._socket?.close();
    this._socket = null;
    this._setState('closed');
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
    socket.onmessage = event => this._receive(String(event.data));
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
    } else if (message.type === 'batch') {
      this._last = message.last;
      if (message.logs?.length) {
        this._lines.emit(message.logs as ILogLine[]);
      }
      if (message.metrics?.length) {
        this._metrics.emit(message.metrics as IMetric[]);
      }
      if (message.events?.length) {
        this._events.emit(message.events as IEvent[]);
      }
    } else if (message.type === 'flags') {
      this._flags.emit(message.flags as IFlag[]);
    } else if (message.type === 'gap') {
      // The server skipped ahead for a slow page: resume from there.
      this._last = message.upto;
    }
  }

  private _setState(state: ConnectionState): void {
    if (state !== this._state) {
      this._state = state;
      this._stateChanged.emit(state);
    }
  }

  private _events = new Signal<this, IEvent[]>(this);
  private _flags = new Signal<this, IFlag[]>(this);
  private _kinds: StreamKind[];
  private _metrics = new Signal<this, IMetric[]>(this);
  private _reset = new Signal<this, ITarget>(this);
  private _last = 0;
  private _lines = new Signal<this, ILogLine[]>(this);
  private _retries = 0;
  private _since: number | undefined = undefined;
  private _socket: WebSocket | null = null;
  private _state: ConnectionState = 'closed';
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _target: ITarget | null = null;
  private _timer = 0;
}
