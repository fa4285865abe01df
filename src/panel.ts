import { PanelLayout, Widget } from '@lumino/widgets';

import { ICluster, IRun } from './api';
import { ClustersView } from './clusters';
import { FlagsView } from './flags';
import { observeIcon } from './icon';
import { LogsView } from './logs';
import { RunsView } from './runs';
import { LogStream } from './stream';

/**
 * Rows a live view starts with, before the newest.
 */
const LOG_TAIL = 20_000;

/**
 * The DOM id of the side panel; acceptance checks and users' CSS rely on it.
 */
export const PANEL_ID = 'dask-observe-panel';

/**
 * The Dask Observe side panel: one widget holding the views of the store.
 */
export class ObservePanel extends Widget {
  constructor(options: ObservePanel.IOptions) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DaskObserve-panel');
    this.title.icon = observeIcon;
    this.title.caption = 'Dask Observe';
    const layout = (this.layout = new PanelLayout());
    this.stream = new LogStream();
    this.clusters = new ClustersView({
      openPage: options.openDashboard,
      onClusters: clusters => this._followNewest(clusters)
    });
    this.logs = new LogsView({ stream: this.stream });
    this.flagStream = new LogStream(['flags']);
    this.flags = new FlagsView(this.flagStream);
    this.runs = new RunsView({
      openReport: options.openReport,
      onRuns: runs => this._judgeNewest(runs)
    });
    layout.addWidget(this.clusters);
    layout.addWidget(this.flags);
    layout.addWidget(this.logs);
    layout.addWidget(this.runs);
  }

  dispose(): void {
    this.stream.dispose();
    this.flagStream.dispose();
    super.dispose();
  }

  /**
   * Show the flags of the newest run (the server judges them again while it
   * runs and sends them when they change).
   */
  private _judgeNewest(runs: IRun[]): void {
    const newest = runs[0];
    if (newest && newest.id !== this._judging) {
      this._judging = newest.id;
      this.flags.setRun(`run ${newest.id}`);
      this.flagStream.follow({ run: newest.id });
    }
  }

  /**
   * The flags of the newest run.
   */
  readonly flags: FlagsView;

  /**
   * The websocket that brings the newest run's flags.
   */
  readonly flagStream: LogStream;

  private _judging: number | null = null;

  /**
   * Follow the logs of the most recently seen live cluster, starting from
   * about its last LOG_TAIL rows.
   */
  private _followNewest(clusters: ICluster[]): void {
    const newest = clusters.find(c => c.alive);
    if (newest && newest.id !== this._following) {
      this._following = newest.id;
      this.stream.follow({ cluster: newest.id }, -LOG_TAIL);
    }
  }

  /**
   * The live log lines.
   */
  readonly logs: LogsView;

  /**
   * The websocket the live views read.
   */
  readonly stream: LogStream;

  private _following: string | null = null;

  /**
   * The clusters being (or once) recorded, with their dashboard pages.
   */
  readonly clusters: ClustersView;

  /**
   * The list of recorded runs.
   */
  readonly runs: RunsView;
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
     * Open a page of a cluster's dashboard in the main area.
     */
    openDashboard: (clusterId: string, page: string) => void;
  }
}
