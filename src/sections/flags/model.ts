import type { IDisposable } from '@lumino/disposable';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { StreamConnection } from '../../data/connection';
import type { IFlag } from '../../data/stream';
import { StoreStream } from '../../data/stream';

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
