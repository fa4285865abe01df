import { SidePanel } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { ISignal } from '@lumino/signaling';
import { AccordionPanel, SplitPanel, Widget } from '@lumino/widgets';

import { ICluster, IRun } from './api';
import { ClustersView } from './clusters';
import { StreamConnection } from './connection';
import { FlagsView } from './flags';
import { FollowModel } from './follow';
import { HistoryView } from './history';
import { observeIcon } from './icon';
import { LOG_TAIL, LogsView } from './logs';
import { MetricsView } from './metrics';
import { MetricsModel } from './metricsmodel';
import {
  ClusterModel,
  FlagsModel,
  HistoryModel,
  RunsModel,
  TeamModel
} from './models';
import { ReplayBar } from './replay';
import { RunsView } from './runs';
import { TeamView } from './team';
import { DEFAULT_SETTINGS, IPanelSettings } from './settings';
import { SectionFolds, SectionSizer } from './sections';
import { ITarget, StoreStream } from './stream';
import { LogsTab } from './tabs';

/**
 * The DOM id of the side panel; acceptance checks and users' CSS rely on it.
 */
export const PANEL_ID = 'dask-observe-panel';

export { DEFAULT_SETTINGS, IPanelSettings } from './settings';

/**
 * The Dask Observe side panel: one widget holding the views of the store.
 *
 * Live, it follows the most recently seen live cluster and the newest run's
 * flags (with no live cluster seen yet, the newest run's logs and metrics); a
 * run's "Logs" button replays that run in the same views until "Back to live".
 */
export class ObservePanel extends SidePanel {
  constructor(options: ObservePanel.IOptions) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DaskObserve-panel');
    this.title.icon = observeIcon;
    this.title.caption = 'Dask Observe';
    const settings = { ...DEFAULT_SETTINGS, ...options.settings };
    // One socket for the panel's subscriptions: its logs, metrics and flags.
    this.connection = new StreamConnection();
    this.stream = new StoreStream(['logs'], this.connection);
    this.metricsStream = new StoreStream(
      ['metrics', 'events'],
      this.connection
    );
    this._openLogsTab = options.openLogs;
    // Polled while the panel shows (see onAfterShow), not while it is hidden.
    this.clusterModel = new ClusterModel({
      interval: settings.refreshInterval,
      active: false
    });
    this.runsModel = new RunsModel({
      interval: settings.refreshInterval,
      active: false
    });
    this.clusterModel.changed.connect((_, clusters) => {
      this._clusters = clusters;
      this.follow.setClusters(clusters);
    });
    this.runsModel.changed.connect((_, runs) => {
      this._runs = runs;
      this.historyModel.follow(runs);
      this.follow.setRuns(runs);
    });
    this.follow.changed.connect((_, what) => this._apply(what));
    this.clusters = new ClustersView({
      model: this.clusterModel,
      openPage: options.openDashboard
    });
    this._replayBar = new ReplayBar(() => this.live());
    this.metricsModel = new MetricsModel({
      stream: this.metricsStream,
      windowSeconds: settings.metricsWindow
    });
    this.metrics = new MetricsView({ model: this.metricsModel });
    this.logs = new LogsView({
      stream: this.stream,
      maxLines: settings.logBufferSize,
      level: settings.defaultLevel,
      openInTab: () => this.openLogsTab()
    });
    this.metricsModel.goneChanged.connect((_, gone) => this.logs.setGone(gone));
    this.metricsModel.workerAdded.connect((_, worker) =>
      this.logs.addWorker(worker)
    );
    this.flagsModel = new FlagsModel(this.connection);
    this.flags = new FlagsView(this.flagsModel);
    this.runs = new RunsView({
      model: this.runsModel,
      openReport: options.openReport,
      openComparison: options.openComparison,
      replay: run => this.replay(run),
      showHistory: run => this.showHistory(run)
    });
    this.teamModel = new TeamModel({ active: false });
    this.team = new TeamView({
      model: this.teamModel,
      openReport: options.openArchiveReport,
      openComparison: options.openArchiveComparison
    });
    this.historyModel = new HistoryModel();
    this.history = new HistoryView(this.historyModel);
    this.configure(settings);
    this.header.addWidget(this._replayBar);
    // Sections of an accordion, as the debugger's sidebar has them: each
    // collapses to its title; the logs get the most room.
    const sections: [Widget, string, number][] = [
      [this.clusters, 'Clusters', 1],
      [this.metrics, 'Workers', 2],
      [this.flags, 'Flags', 1],
      [this.logs, 'Logs', 3],
      [this.history, 'History', 1],
      [this.runs, 'Runs', 2],
      [this.team, 'Team', 1]
    ];
    for (const [view, label, stretch] of sections) {
      view.title.label = label;
      view.addClass('jp-DaskObserve-section');
      SplitPanel.setStretch(view, stretch);
      this.addWidget(view);
    }
    const accordion = this.content as AccordionPanel;
    this._folds = new SectionFolds(accordion);
    this._sizer = new SectionSizer(accordion, this.logs);
    this.teamModel.changed.connect(() => this._fitTeam());
  }

  /**
   * The Team section folded where no archive is set (its one line of how to
   * set one up is not worth the room the runs need at 900 px), opened the
   * first time one is.
   */
  private _fitTeam(): void {
    const hasArchive = this.teamModel.archive !== null;
    if (!hasArchive) {
      this._folds.fold(this.team, true);
    } else if (!this._teamShown) {
      this._folds.fold(this.team, false);
    }
    this._teamShown ||= hasArchive;
  }

  /**
   * The titles of the sections folded now; set, the sections of these titles
   * folded and the others opened (restoring what the user left).
   */
  get collapsed(): string[] {
    return this._folds.collapsed;
  }

  set collapsed(titles: string[]) {
    this._folds.collapsed = titles;
  }

  /**
   * Told the folded sections' titles when the user folds or opens one.
   */
  get collapsedChanged(): ISignal<SectionFolds, string[]> {
    return this._folds.changed;
  }

  /**
   * Apply changed settings to the open views.
   */
  configure(settings: Partial<IPanelSettings>): void {
    const s = (this._settings = { ...this._settings, ...settings });
    this.clusterModel.interval = s.refreshInterval;
    this.runsModel.interval = s.refreshInterval;
    this.metrics.refreshInterval = Math.min(1000, s.refreshInterval);
    this.metricsModel.windowSeconds = s.metricsWindow;
    this.logs.maxLines = s.logBufferSize;
    if (settings.defaultLevel !== undefined) {
      this.logs.level = s.defaultLevel;
    }
  }

  /**
   * Show a run's logs, metrics and flags (all of them, from its start) in
   * place of the live ones.
   */
  replay(runId: number): void {
    this.follow.replay(runId);
  }

  /**
   * Show the history of that run's name (until another is asked for; the
   * newest run's while none is).
   */
  showHistory(runId: number): void {
    this.historyModel.pin(runId, this._runs);
  }

  /**
   * Follow the newest live cluster and run again.
   */
  live(): void {
    this.follow.backToLive();
  }

  /**
   * A logs tab of `target` that starts out like the panel's logs: the same
   * lowest level and buffer, and, when the panel's metrics follow the same
   * cluster or run, the same workers marked as gone.
   */
  logsTabOptions(target: ITarget, label: string): LogsTab.IOptions {
    const metrics = this.metricsModel;
    const same =
      JSON.stringify(this.metricsStream.target) === JSON.stringify(target);
    return {
      target,
      label,
      maxLines: this._settings.logBufferSize,
      level: this.logs.level,
      gone: same
        ? {
            get current() {
              return metrics.gone;
            },
            changed: metrics.goneChanged
          }
        : undefined
    };
  }

  /**
   * The settings in effect.
   */
  get settings(): Readonly<IPanelSettings> {
    return this._settings;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.clusterModel.dispose();
    this.runsModel.dispose();
    this.teamModel.dispose();
    this.stream.dispose();
    this.metricsStream.dispose();
    this.flagsModel.dispose();
    this.metricsModel.dispose();
    this.connection.dispose();
    this.historyModel.dispose();
    this.follow.dispose();
    this._sizer.dispose();
    super.dispose();
  }

  /**
   * The lists are polled while the panel shows, and read at once when it does.
   */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._poll(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._poll(false);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._poll(this.isVisible); // attached where it shows: no show message
  }

  protected onBeforeDetach(msg: Message): void {
    this._poll(false);
    super.onBeforeDetach(msg);
  }

  private _poll(active: boolean): void {
    this.clusterModel.active = active;
    this.runsModel.active = active;
    this.teamModel.active = active;
  }

  /**
   * Open what the logs view follows (the live cluster, or the replayed run) in
   * a main-area tab.
   */
  openLogsTab(): void {
    const target = this.stream.target;
    if (target?.run !== undefined) {
      this._openLogsTab(target, `run ${target.run}`);
    } else if (target?.cluster !== undefined) {
      const cluster = this._clusters.find(c => c.id === target.cluster);
      this._openLogsTab(target, cluster?.address ?? target.cluster);
    }
  }

  /**
   * Do what the follow model decided: the streams follow its target, the
   * flags its run, the workers greyed while their cluster is gone, the
   * replay bar while a run is replayed.
   */
  private _apply(what: ReadonlySet<FollowModel.Change>): void {
    const follow = this.follow;
    const target = follow.target;
    if (what.has('target') && target !== null) {
      this.logs.setSubject(follow.subject);
      if (follow.live) {
        this.stream.follow(target, -LOG_TAIL);
        this.metricsStream.follow(target, 0, this._settings.metricsWindow);
      } else {
        this.stream.follow(target);
        this.metricsStream.follow(target);
      }
    }
    if (what.has('flags') && follow.flagsRun !== null) {
      this.flagsModel.follow(follow.flagsRun);
    }
    if (what.has('gone')) {
      this.metrics.node.classList.toggle('jp-mod-gone', follow.gone);
    }
    if (what.has('replay')) {
      this._replayBar.showRun(follow.replaying);
    }
  }

  /**
   * The clusters being (or once) recorded, with their dashboard pages.
   */
  readonly clusters: ClustersView;

  /**
   * What the live views follow (a live cluster, the newest run, a replay).
   */
  readonly follow = new FollowModel();

  /**
   * The clusters recorders watch, polled while the panel shows.
   */
  readonly clusterModel: ClusterModel;

  /**
   * The runs in the store, polled while the panel shows.
   */
  readonly runsModel: RunsModel;

  /**
   * The flags of the newest (or replayed) run.
   */
  readonly flags: FlagsView;

  /**
   * The flags of the newest (or replayed) run, as the server judges them.
   */
  readonly flagsModel: FlagsModel;

  /**
   * The live (or replayed) log lines.
   */
  readonly logs: LogsView;

  /**
   * Workers with their memory, CPU and tasks, and sparklines.
   */
  readonly metrics: MetricsView;

  /**
   * The samples and workers the metrics view draws.
   */
  readonly metricsModel: MetricsModel;

  /**
   * The metrics view's subscription.
   */
  readonly metricsStream: StoreStream;

  /**
   * The list of recorded runs.
   */
  readonly runs: RunsView;

  /**
   * The runs of the team's archive, from every machine.
   */
  readonly team: TeamView;

  /**
   * The team's runs, polled while the panel shows.
   */
  readonly teamModel: TeamModel;

  /**
   * Wall time and peak memory of the runs sharing the selected run's name.
   */
  readonly history: HistoryView;

  /**
   * The history that view shows.
   */
  readonly historyModel: HistoryModel;

  /**
   * The logs view's subscription.
   */
  readonly stream: StoreStream;

  /**
   * The one websocket of the panel's subscriptions.
   */
  readonly connection: StreamConnection;

  private _clusters: readonly ICluster[] = [];
  private _openLogsTab: (target: ITarget, label: string) => void;
  private _replayBar: ReplayBar;
  private _runs: readonly IRun[] = [];
  private _settings: IPanelSettings = { ...DEFAULT_SETTINGS };
  private _teamShown = false;
  private _folds: SectionFolds;
  private _sizer: SectionSizer;
}

/**
 * The namespace for `ObservePanel` statics.
 */
export namespace ObservePanel {
  export interface IOptions {
    /**
     * Open a run's report in the main area.
     */
    openReport: (runId: number) => void;
    /**
     * Open the comparison of run `b` against run `a` in the main area.
     */
    openComparison: (a: number, b: number) => void;
    /**
     * Open the report of a run of the team's archive in the main area.
     */
    openArchiveReport: (uid: string) => void;
    /**
     * Open two runs of the team's archive compared (b against a).
     */
    openArchiveComparison: (a: string, b: string) => void;
    /**
     * Open a page of a cluster's dashboard in the main area.
     */
    openDashboard: (clusterId: string, page: string) => void;
    /**
     * Follow a cluster's or a run's logs in a main-area tab; `label` names it.
     */
    openLogs: (target: ITarget, label: string) => void;
    /**
     * Settings to start with (the rest are defaults).
     */
    settings?: Partial<IPanelSettings>;
  }
}
