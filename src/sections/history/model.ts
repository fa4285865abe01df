import type { IDisposable } from '@lumino/disposable';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { IHistory, IRun } from '../../data/api';
import { fetchHistory } from '../../data/api';

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
