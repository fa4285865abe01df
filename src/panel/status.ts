import type { IDisposable } from '@lumino/disposable';
import { Signal } from '@lumino/signaling';

import { element } from '../ui/dom';
import type { ConnectionState, IGap, StoreStream } from '../data/stream';

/**
 * A subscription's state in the user's words, beside a view's heading:
 * nothing while it is open; nothing while it follows nothing yet (its initial
 * state: the view's own text says what to do), never the socket's "closed".
 */
export function stateWords(state: ConnectionState): string {
  switch (state) {
    case 'connecting':
      return '(connecting…)';
    case 'reconnecting':
      return '(connection lost: reconnecting…)';
    default:
      return '';
  }
}

/**
 * How a view's subscription stands, beside its heading: nothing while it is
 * open and whole; "(connection lost: reconnecting…)", why the server refused it, or
 * that rows are missing where a gap could not be filled. Text only: a
 * refusal may quote the store.
 */
export class StreamStatus implements IDisposable {
  constructor(stream: StoreStream) {
    this.node = element('span', 'jp-DaskObserve-stream-state');
    stream.stateChanged.connect((_, state) => this._showState(state), this);
    stream.failed.connect((_, why) => this._show(`(${why})`, 'error'), this);
    stream.gaps.connect((_, gap) => this._showGap(gap), this);
    stream.reset.connect(() => this._show('', 'open'), this);
  }

  readonly node: HTMLSpanElement;

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    this._isDisposed = true;
    Signal.clearData(this);
  }

  private _showState(state: ConnectionState): void {
    if (state === 'open' && this.node.dataset.state === 'gap') {
      return; // still missing rows: said until the view starts over
    }
    this._show(stateWords(state), state);
  }

  private _showGap(gap: IGap): void {
    if (!gap.filled) {
      this._show('(some rows could not be read)', 'gap');
    }
  }

  private _show(text: string, state: string): void {
    this.node.textContent = text;
    this.node.dataset.state = state;
  }

  private _isDisposed = false;
}
