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
  constructor(kinds: ('logs' | 'flags')[] = ['logs']) {
    this._kinds = kinds;
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
   * Follow ``target`` from sequence number ``after`` (0: from its start).
   */
  follow(target: ITarget, after = 0): void {
    this._target = target;
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

  private _flags = new Signal<this, IFlag[]>(this);
  private _kinds: ('logs' | 'flags')[];
  private _last = 0;
  private _lines = new Signal<this, ILogLine[]>(this);
  private _retries = 0;
  private _socket: WebSocket | null = null;
  private _state: ConnectionState = 'closed';
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _target: ITarget | null = null;
  private _timer = 0;
}
