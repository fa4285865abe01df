import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import type { ICluster, IRun } from '../data/api';
import type { ITarget } from '../data/stream';

/**
 * What the panel's live views follow, and why: the newest live cluster; with
 * none, the newest run; or a run the user replays until "Back to live". The
 * flags shown are the newest run's, or the replayed run's. No DOM, no
 * sockets: the panel applies what it says (and jest tests it).
 */
export class FollowModel {
  /**
   * Told what changed: `target` (what the logs and metrics follow, and the
   * logs' subject), `flags` (whose flags), `gone` (whether the followed
   * cluster is gone), `replay` (a run replayed, or live again).
   */
  get changed(): ISignal<this, ReadonlySet<FollowModel.Change>> {
    return this._changed;
  }

  /**
   * What the logs and metrics follow (null: nothing yet).
   */
  get target(): ITarget | null {
    return this._target;
  }

  /**
   * Whether the target is a live cluster (followed from its recent past,
   * not from its start).
   */
  get live(): boolean {
    return this._target?.cluster !== undefined;
  }

  /**
   * What the logs say they show beside their heading ('' for nothing more).
   */
  get subject(): string {
    return this._subject;
  }

  /**
   * The run whose flags are shown (null: none yet).
   */
  get flagsRun(): number | null {
    return this._judging;
  }

  /**
   * The run replayed (null: live).
   */
  get replaying(): number | null {
    return this._replaying;
  }

  /**
   * Whether the cluster followed is no longer alive (its workers greyed).
   */
  get gone(): boolean {
    return this._gone;
  }

  /**
   * The clusters changed (polled): follow the newest live one.
   */
  setClusters(clusters: readonly ICluster[]): void {
    const told = new Set<FollowModel.Change>();
    this._clusters = clusters;
    this._clustersKnown = true;
    const followed = clusters.find(c => c.id === this._following);
    const gone =
      this._replaying === null && followed !== undefined && !followed.alive;
    if (gone !== this._gone) {
      this._gone = gone;
      told.add('gone');
    }
    const newest = clusters.find(c => c.alive);
    if (newest && newest.id !== this._following && this._replaying === null) {
      this._following = newest.id;
      this._newestShown = null;
      this._follow({ cluster: newest.id }, '', told);
    }
    this._newestRun(told);
    this._tell(told);
  }

  /**
   * The runs changed (polled, newest first): show the newest one's flags,
   * and its logs where no live cluster is followed.
   */
  setRuns(runs: readonly IRun[]): void {
    const told = new Set<FollowModel.Change>();
    this._runs = runs;
    const newest = runs[0];
    if (newest && newest.id !== this._judging && this._replaying === null) {
      this._judging = newest.id;
      told.add('flags');
    }
    this._newestRun(told);
    this._tell(told);
  }

  /**
   * Show a run's logs, metrics and flags, all of them from its start.
   */
  replay(runId: number): void {
    const told = new Set<FollowModel.Change>(['replay', 'flags']);
    this._replaying = runId;
    this._newestShown = null;
    this._judging = runId;
    this._follow({ run: runId }, '', told);
    this._tell(told);
  }

  /**
   * Follow the newest live cluster and run again.
   */
  backToLive(): void {
    this._replaying = null;
    this._following = null;
    this._judging = null;
    this._newestShown = null;
    this._changed.emit(new Set(['replay']));
    this.setClusters(this._clusters);
    this.setRuns(this._runs);
  }

  dispose(): void {
    Signal.clearData(this);
  }

  /**
   * With no live cluster followed yet, the newest run's logs and metrics
   * rather than an empty view (until a live cluster appears).
   */
  private _newestRun(told: Set<FollowModel.Change>): void {
    const newest = this._runs[0];
    if (
      // Until the clusters are known, a live one may be there: following the
      // newest run meanwhile would switch views under the user (and clear the
      // first lines shown) when the clusters arrive.
      !this._clustersKnown ||
      newest === undefined ||
      newest.id === this._newestShown ||
      this._replaying !== null ||
      this._following !== null ||
      this._clusters.some(c => c.alive)
    ) {
      return;
    }
    this._newestShown = newest.id;
    this._follow(
      { run: newest.id },
      `of run ${newest.id} (no live cluster)`,
      told
    );
  }

  private _follow(
    target: ITarget,
    subject: string,
    told: Set<FollowModel.Change>
  ): void {
    this._target = target;
    this._subject = subject;
    told.add('target');
  }

  private _tell(told: Set<FollowModel.Change>): void {
    if (told.size > 0) {
      this._changed.emit(told);
    }
  }

  private _changed = new Signal<this, ReadonlySet<FollowModel.Change>>(this);
  private _clusters: readonly ICluster[] = [];
  private _clustersKnown = false;
  private _following: string | null = null;
  private _gone = false;
  private _judging: number | null = null;
  private _newestShown: number | null = null;
  private _replaying: number | null = null;
  private _runs: readonly IRun[] = [];
  private _subject = '';
  private _target: ITarget | null = null;
}

/**
 * The namespace for `FollowModel` statics.
 */
export namespace FollowModel {
  export type Change = 'target' | 'flags' | 'gone' | 'replay';
}
