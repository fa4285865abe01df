import type { IDisposable } from '@lumino/disposable';
import { DisposableDelegate, DisposableSet } from '@lumino/disposable';

import type { ICluster } from '../data/api';
import { StreamConnection } from '../data/connection';
import { FollowModel } from './follow';
import { LOG_TAIL, RUN_TAIL } from '../sections/logs/buffer';
import { MetricsModel } from '../sections/metrics/model';
import { ClusterModel } from '../sections/clusters/model';
import { FlagsModel } from '../sections/flags/model';
import { HistoryModel } from '../sections/history/model';
import { RunsModel } from '../sections/runs/model';
import { TeamModel } from '../sections/team/model';
import type { IPanelSettings } from '../settings';
import { DEFAULT_SETTINGS } from '../settings';
import { StoreStream } from '../data/stream';

/**
 * How often the clusters are polled: as often as the lists, and at least
 * every 2 s. A client made or closed in a notebook shows within seconds (the
 * list is a few rows); the runs list, which can be long, keeps the setting.
 */
export function clusterInterval(refreshInterval: number): number {
  return Math.min(refreshInterval, 2000);
}

/**
 * What the side panel shows, without drawing any of it: its one socket and
 * the subscriptions on it, the lists it polls, and the follow model, whose
 * decisions it carries out on the subscriptions (the live cluster from its
 * recent past, a run from its start). The panel's views draw these; jest
 * tests them over a fake socket.
 */
export class PanelModels implements IDisposable {
  constructor(settings: Partial<IPanelSettings> = {}) {
    const s = (this._settings = { ...DEFAULT_SETTINGS, ...settings });
    this.logs = new StoreStream(['logs'], this.connection);
    this.metricsStream = new StoreStream(
      ['metrics', 'events'],
      this.connection
    );
    this.metrics = new MetricsModel({
      stream: this.metricsStream,
      windowSeconds: s.metricsWindow
    });
    this.flags = new FlagsModel(this.connection);
    // Polled while the panel shows (see `active`), not while it is hidden.
    this.clusters = new ClusterModel({
      interval: clusterInterval(s.refreshInterval),
      active: false
    });
    this.runs = new RunsModel({ interval: s.refreshInterval, active: false });
    this.team = new TeamModel({ active: false });
    this.clusters.changed.connect((_, clusters) =>
      this.follow.setClusters(clusters)
    );
    this.runs.changed.connect((_, runs) => {
      this.history.follow(runs);
      this.follow.setRuns(runs);
    });
    this.follow.changed.connect((_, what) => this._apply(what));
    this._owned = DisposableSet.from([
      this.clusters,
      this.runs,
      this.team,
      this.logs,
      this.metricsStream,
      this.flags,
      this.metrics,
      this.connection,
      this.history,
      new DisposableDelegate(() => this.follow.dispose())
    ]);
  }

  /**
   * The one websocket of the panel's subscriptions.
   */
  readonly connection = new StreamConnection();

  /**
   * The logs' subscription.
   */
  readonly logs: StoreStream;

  /**
   * The metrics' and worker events' subscription.
   */
  readonly metricsStream: StoreStream;

  /**
   * The samples and workers the metrics view draws.
   */
  readonly metrics: MetricsModel;

  /**
   * The flags of the newest (or replayed) run, as the server judges them.
   */
  readonly flags: FlagsModel;

  /**
   * The clusters recorders watch.
   */
  readonly clusters: ClusterModel;

  /**
   * The runs in the store.
   */
  readonly runs: RunsModel;

  /**
   * The team's runs.
   */
  readonly team: TeamModel;

  /**
   * Wall time and peak memory of the runs sharing a run's name.
   */
  readonly history = new HistoryModel();

  /**
   * What the live views follow (a live cluster, the newest run, a replay).
   */
  readonly follow = new FollowModel();

  /**
   * The clusters as last polled.
   */
  get clusterList(): readonly ICluster[] {
    return this.clusters.items;
  }

  /**
   * Whether the lists are polled (while the panel shows).
   */
  set active(active: boolean) {
    this.clusters.active = active;
    this.runs.active = active;
    this.team.active = active;
  }

  /**
   * The settings in effect.
   */
  get settings(): Readonly<IPanelSettings> {
    return this._settings;
  }

  /**
   * Apply changed settings to the models (the views take theirs).
   */
  configure(settings: Partial<IPanelSettings>): void {
    const s = (this._settings = { ...this._settings, ...settings });
    this.clusters.interval = clusterInterval(s.refreshInterval);
    this.runs.interval = s.refreshInterval;
    this.metrics.windowSeconds = s.metricsWindow;
  }

  /**
   * Show the history of that run's name (until another is asked for; the
   * newest run's while none is).
   */
  showHistory(runId: number): void {
    this.history.pin(runId, this.runs.items);
  }

  get isDisposed(): boolean {
    return this._owned.isDisposed;
  }

  dispose(): void {
    this._owned.dispose();
  }

  /**
   * Carry out what the follow model decided on the subscriptions: a live
   * cluster from its recent past (the logs' tail, the metrics' window), a
   * run's logs from near its end (its tab shows them all), its metrics
   * whole; the flags of its run.
   */
  private _apply(what: ReadonlySet<FollowModel.Change>): void {
    const target = this.follow.target;
    if (what.has('target') && target !== null) {
      if (this.follow.live) {
        this.logs.follow(target, -LOG_TAIL);
        this.metricsStream.follow(target, 0, this._settings.metricsWindow);
      } else {
        this.logs.follow(target, -RUN_TAIL);
        this.metricsStream.follow(target);
      }
    }
    if (what.has('flags') && this.follow.flagsRun !== null) {
      this.flags.follow(this.follow.flagsRun);
    }
  }

  private _owned: DisposableSet;
  private _settings: IPanelSettings;
}
