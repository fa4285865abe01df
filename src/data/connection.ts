import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';

/**
 * What a connection needs of a subscription on it (a `StoreStream`).
 */
export interface IChannel {
  /**
   * The subscribe message to send now, or null while it follows nothing
   * (the connection just opened, or opened again after a drop).
   */
  subscription(): Record<string, unknown> | null;
  /**
   * A message the server sent for this channel's subscription.
   */
  receive(message: Record<string, unknown>): void;
  /**
   * The connection dropped; it will reconnect by itself.
   */
  dropped(): void;
}

/**
 * One `dask-observe/api/stream` websocket for several subscriptions (a
 * panel's logs, metrics and flags), each with an id the server puts on its
 * messages. After a drop it reconnects by itself (0.5 s, 1 s, 2 s, ... at
 * most 10 s apart) and every channel subscribes again, from where it was.
 */
export class StreamConnection implements IDisposable {
  /**
   * Follow with `channel` under `id` (its subscription replacing the one it
   * had under `previous`: frames of that id still on their way are dropped),
   * opening the socket if need be.
   */
  follow(id: string, channel: IChannel, previous?: string): void {
    if (previous !== undefined && previous !== id) {
      this.leave(previous);
    }
    this._channels.set(id, channel);
    if (this._socket === null) {
      this._connect(); // it subscribes every channel when it opens
      return;
    }
    const message = channel.subscription();
    if (message) {
      this._sendNow({ ...message, id });
    }
  }

  /**
   * End the subscription of `id`.
   */
  leave(id: string): void {
    if (this._channels.delete(id)) {
      this._sendNow({ type: 'unsubscribe', id });
    }
  }

  /**
   * The server answered a subscription: the next drop waits 0.5 s again.
   */
  resetBackoff(): void {
    this._retries = 0;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Close the socket for good.
   */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    window.clearTimeout(this._timer);
    this._channels.clear();
    this._socket?.close();
    this._socket = null;
  }

  private _sendNow(message: Record<string, unknown>): void {
    if (this._open && this._socket) {
      this._socket.send(JSON.stringify(message));
    }
  }

  private _connect(): void {
    if (this._isDisposed) {
      return;
    }
    window.clearTimeout(this._timer);
    this._socket?.close();
    this._open = false;
    const settings = ServerConnection.makeSettings();
    let url = URLExt.join(settings.wsUrl, 'dask-observe', 'api', 'stream');
    if (settings.appendToken && settings.token) {
      url += `?token=${encodeURIComponent(settings.token)}`;
    }
    const socket = new settings.WebSocket(url);
    this._socket = socket;
    socket.onopen = () => {
      if (this._socket !== socket) {
        return;
      }
      this._open = true;
      for (const [id, channel] of this._channels) {
        const message = channel.subscription();
        if (message) {
          socket.send(JSON.stringify({ ...message, id }));
        }
      }
    };
    socket.onmessage = event => {
      // A replaced socket's frames may still be queued in the browser.
      if (this._socket !== socket) {
        return;
      }
      const message = JSON.parse(String(event.data));
      this._channels.get(String(message.id ?? ''))?.receive(message);
    };
    socket.onclose = () => {
      if (this._socket !== socket || this._isDisposed) {
        return; // replaced or disposed: nothing to resume
      }
      this._open = false;
      this._socket = null;
      for (const channel of this._channels.values()) {
        channel.dropped();
      }
      const delay = Math.min(10_000, 500 * 2 ** this._retries);
      this._retries += 1;
      this._timer = window.setTimeout(() => this._connect(), delay);
    };
  }

  private _channels = new Map<string, IChannel>();
  private _isDisposed = false;
  private _open = false;
  private _retries = 0;
  private _socket: WebSocket | null = null;
  private _timer = 0;
}
