import { SidePanel } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import type { ISignal } from '@lumino/signaling';
import type { AccordionPanel, Widget } from '@lumino/widgets';
import { SplitPanel } from '@lumino/widgets';

import { ClustersView } from '../sections/clusters/view';
import { FlagsView } from '../sections/flags/view';
import type { FollowModel } from './follow';
import { HistoryView } from '../sections/history/view';
import { observeIcon } from '../icon';
import { LogsView } from '../sections/logs/view';
import { MetricsView } from '../sections/metrics/view';
import { PanelModels } from './panelmodels';
import { ReplayBar } from './replay';
import { RunsView } from '../sections/runs/view';
import { TeamView } from '../sections/team/view';
import type { IPanelSettings } from '../settings';
import { SectionFolds, SectionSizer } from './sections';
import type { ITarget } from '../data/stream';
import type { IDaskObserve } from '../tokens';
import type { LogsTab } from './tabs';

/**
 * The DOM id of the side panel; acceptance checks and users' CSS rely on it.
 */
export const PANEL_ID = 'dask-observe-panel';

export { DEFAULT_SETTINGS, IPanelSettings } from '../settings';

/**
 * The Dask Observe side panel: the views of the store, drawing its models
 * (`PanelModels`: the socket, subscriptions, polled lists, what is followed).
 *
 * Live, it follows the most recently seen live cluster and the newest run's
 * flags (with no live cluster seen yet, the newest run's logs and metrics); a
 * run's "Logs" button replays that run in the same views until "Back to live".
 */
export class ObservePanel extends SidePanel implements IDaskObserve {
  constructor(options: ObservePanel.IOptions) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DaskObserve-panel');
    this.title.icon = observeIcon;
    this.title.caption = 'Dask Observe';
    const models = (this.models = new PanelModels(options.settings));
    const settings = models.settings;
    this._openLogsTab = options.openLogs;
    models.follow.changed.connect((_, what) => this._apply(what));
    this.clusters = new ClustersView({
      model: models.clusters,
      openPage: options.openDashboard
    });
    this._replayBar = new ReplayBar(() => this.live());
    this.metrics = new MetricsView({ model: models.metrics });
    this.logs = new LogsView({
      stream: models.logs,
      maxLines: settings.logBufferSize,
      level: settings.defaultLevel,
      openInTab: () => this.openLogsTab()
    });
    models.metrics.goneChanged.connect((_, gone) => this.logs.setGone(gone));
    models.metrics.workerAdded.connect((_, worker) =>
      this.logs.addWorker(worker)
    );
    this.flags = new FlagsView(models.flags);
    this.runs = new RunsView({
      model: models.runs,
      openReport: options.openReport,
      openComparison: options.openComparison,
      replay: run => this.replay(run),
      showHistory: run => models.showHistory(run)
    });
    this.team = new TeamView({
      model: models.team,
      openReport: options.openArchiveReport,
      openComparison: options.openArchiveComparison
    });
    this.history = new HistoryView(models.history);
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
    this._sizer = new SectionSizer(accordion, this.logs, this.logs.listNode);
    models.team.changed.connect(() => this._fitTeam());
  }

  /**
   * The Team section folded where no archive is set (its one line of how to
   * set one up is not worth the room the runs need at 900 px), opened the
   * first time one is.
   */
  private _fitTeam(): void {
    const hasArchive = this.models.team.archive !== null;
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
    this.models.configure(settings);
    const s = this.models.settings;
    this.metrics.refreshInterval = Math.min(1000, s.refreshInterval);
    this.logs.maxLines = s.logBufferSize;
    if (settings.defaultLevel !== undefined) {
      this.logs.level = s.defaultLevel;
    }
  }

  /**
   * The side panel itself (what the token offers other extensions).
   */
  get panel(): Widget {
    return this;
  }

  /**
   * Show a run's logs, metrics and flags (all of them, from its start) in
   * place of the live ones.
   */
  replay(runId: number): void {
    this.models.follow.replay(runId);
  }

  /**
   * Follow the newest live cluster and run again.
   */
  live(): void {
    this.models.follow.backToLive();
  }

  /**
   * A logs tab of `target` that starts out like the panel's logs: the same
   * lowest level and buffer, and, when the panel's metrics follow the same
   * cluster or run, the same workers marked as gone.
   */
  logsTabOptions(target: ITarget, label: string): LogsTab.IOptions {
    const metrics = this.models.metrics;
    const same =
      JSON.stringify(this.models.metricsStream.target) ===
      JSON.stringify(target);
    return {
      target,
      label,
      maxLines: this.models.settings.logBufferSize,
      level: this.logs.level,
      gone: same ? metrics.goneWorkers : undefined
    };
  }

  /**
   * The settings in effect.
   */
  get settings(): Readonly<IPanelSettings> {
    return this.models.settings;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.models.dispose();
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
    this.models.active = active;
  }

  /**
   * Open what the logs view follows (the live cluster, or the replayed run) in
   * a main-area tab.
   */
  openLogsTab(): void {
    const target = this.models.logs.target;
    if (target?.run !== undefined) {
      this._openLogsTab(target, `run ${target.run}`);
    } else if (target?.cluster !== undefined) {
      const clusters = this.models.clusterList;
      const cluster = clusters.find(c => c.id === target.cluster);
      this._openLogsTab(target, cluster?.address ?? target.cluster);
    }
  }

  /**
   * Draw what the follow model decided (the models follow it themselves):
   * the logs' subject, the workers greyed while their cluster is gone, the
   * replay bar while a run is replayed.
   */
  private _apply(what: ReadonlySet<FollowModel.Change>): void {
    const follow = this.models.follow;
    if (what.has('target') && follow.target !== null) {
      this.logs.setSubject(follow.subject);
    }
    if (what.has('gone') || what.has('replay')) {
      this.metrics.node.classList.toggle('jp-mod-gone', follow.gone);
      // A cluster that went away, or a replayed run: the past, said so.
      this.metrics.live = !follow.gone && follow.replaying === null;
    }
    if (what.has('replay')) {
      this._replayBar.showRun(follow.replaying);
    }
  }

  /**
   * What the views draw.
   */
  readonly models: PanelModels;

  /**
   * The clusters being (or once) recorded, with their dashboard pages.
   */
  readonly clusters: ClustersView;

  /**
   * The flags of the newest (or replayed) run.
   */
  readonly flags: FlagsView;

  /**
   * The live (or replayed) log lines.
   */
  readonly logs: LogsView;

  /**
   * Workers with their memory, CPU and tasks, and sparklines.
   */
  readonly metrics: MetricsView;

  /**
   * The list of recorded runs.
   */
  readonly runs: RunsView;

  /**
   * The runs of the team's archive, from every machine.
   */
  readonly team: TeamView;

  /**
   * Wall time and peak memory of the runs sharing the selected run's name.
   */
  readonly history: HistoryView;

  private _openLogsTab: (target: ITarget, label: string) => void;
  private _replayBar: ReplayBar;
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
