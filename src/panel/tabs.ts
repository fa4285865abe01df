import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import type { Message } from '@lumino/messaging';
import type { ISignal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import type { ICluster } from '../data/api';
import { button, element } from '../ui/dom';
import { dateTime } from '../ui/format';
import { observeIcon } from '../icon';
import { LOG_TAIL, LogsView } from '../sections/logs/view';
import type { ClusterModel } from '../sections/clusters/model';
import type { ITarget } from '../data/stream';
import { StoreStream } from '../data/stream';
import type { IGoneWorkers } from '../tokens';

/**
 * The pages of the scheduler's dashboard that the panel offers.
 */
export const DASHBOARD_PAGES = [
  'status',
  'workers',
  'tasks',
  'profile',
  'system',
  'graph'
] as const;

/**
 * A main-area tab showing a page served by the Jupyter server.
 */
function frameTab(
  path: string,
  label: string,
  id: string,
  sandbox: IFrame.SandboxExceptions[]
): MainAreaWidget<IFrame> {
  const frame = new IFrame({ sandbox });
  frame.url = URLExt.join(ServerConnection.makeSettings().baseUrl, path);
  const widget = new MainAreaWidget({ content: frame });
  widget.id = id;
  widget.title.label = label;
  widget.title.icon = observeIcon;
  widget.title.closable = true;
  widget.addClass('jp-DaskObserve-tab');
  return widget;
}

/**
 * A run's full report. It is static HTML (served under a policy that runs no
 * script), shown in a sandbox that allows nothing either.
 */
export function reportTab(runId: number): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/api/runs/${runId}/report`,
    `Run ${runId} report`,
    `dask-observe-report-${runId}`,
    []
  );
}

/**
 * A page of a registered cluster's dashboard, through the server's proxy,
 * sandboxed: an origin of its own (the server says so too), its scripts and
 * websocket reaching only that dashboard, through a capability in its path.
 */
export function dashboardTab(
  clusterId: string,
  page: string
): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/dashboard/${encodeURIComponent(clusterId)}/${encodeURIComponent(page)}`,
    `Dask ${page}`,
    `dask-observe-dashboard-${clusterId}-${page}`,
    // Never allow-same-origin: with it, the page (whatever answers at the
    // cluster's address) could reach into JupyterLab through its parent.
    ['allow-scripts', 'allow-forms', 'allow-popups', 'allow-downloads']
  );
}

/**
 * What a dashboard tab says when its cluster is not live: the page in it
 * froze (or, restored, never came). Null while it is live.
 */
export function goneWords(
  cluster: ICluster | undefined,
  known: boolean
): string | null {
  if (!known || (cluster !== undefined && cluster.alive)) {
    return null;
  }
  return cluster === undefined
    ? 'This cluster is no longer in the store: its dashboard cannot be shown.'
    : `This cluster went away (last seen ${dateTime(cluster.last_seen)}): ` +
        'its dashboard went with it. Its runs and logs stay in the panel.';
}

/**
 * Put a notice above a dashboard tab when its cluster is not live (gone,
 * or pruned from the store), with a button that closes the tab; taken away
 * if it comes back. It follows the panel's clusters, as they are polled.
 */
export function noticeWhenGone(
  widget: MainAreaWidget,
  clusterId: string,
  clusters: ClusterModel
): void {
  const notice = element('div', 'jp-DaskObserve-tab-notice');
  notice.setAttribute('role', 'status');
  const words = element('span', 'jp-DaskObserve-tab-notice-text');
  notice.append(
    words,
    button(
      'jp-DaskObserve-tab-notice-close',
      'Close this tab',
      () => widget.close(),
      'Close this dashboard tab'
    )
  );
  const holder = new Widget({ node: notice });
  const check = (list: readonly ICluster[]): void => {
    const said = goneWords(
      list.find(c => c.id === clusterId),
      clusters.known
    );
    words.textContent = said ?? '';
    holder.setHidden(said === null);
  };
  widget.toolbar.addItem('dask-observe-gone', holder);
  // Connected with the tab as receiver: its disposal cuts the connection.
  clusters.changed.connect((_, list) => check(list), widget);
  check(clusters.items);
}

/**
 * Run `b` compared against run `a`: static HTML like a report.
 */
export function comparisonTab(a: number, b: number): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/api/runs/${a}/compare/${b}`,
    `Runs ${a} ↔ ${b}`,
    `dask-observe-compare-${a}-${b}`,
    []
  );
}

/**
 * A short name for an archive run id (`20261126T021703Z-f57ede01d07b`):
 * its time of day and the start of its random part (`021703-f57e`), which
 * tell apart runs started in the same second.
 */
function shortUid(uid: string): string {
  const [stamp, random] = uid.split('-');
  return `${(stamp ?? '').slice(9, 15)}-${(random ?? '').slice(0, 4)}`;
}

/**
 * The report of a run of the team's archive: static HTML like a local one.
 */
export function archiveReportTab(uid: string): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/api/archive/runs/${encodeURIComponent(uid)}/report`,
    `Team run ${shortUid(uid)} report`,
    `dask-observe-archive-report-${uid}`,
    []
  );
}

/**
 * Two runs of the team's archive compared (b against a), maybe recorded on
 * different machines.
 */
export function archiveComparisonTab(
  a: string,
  b: string
): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/api/archive/runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`,
    `Team runs ${shortUid(a)} ↔ ${shortUid(b)}`,
    `dask-observe-archive-compare-${a}-${b}`,
    []
  );
}

/**
 * A cluster's live logs, or a run's, in a main-area tab: the side panel's logs
 * view with room for long lines, on a websocket of its own (opened when the tab
 * shows, closed with it).
 */
export class LogsTab extends MainAreaWidget<LogsView> {
  constructor(options: LogsTab.IOptions) {
    const stream = new StoreStream();
    super({
      content: new LogsView({
        stream,
        maxLines: options.maxLines,
        level: options.level
      })
    });
    this._stream = stream;
    this._target = options.target;
    const { run, cluster } = options.target;
    this.id =
      run !== undefined
        ? `dask-observe-logs-run-${run}`
        : `dask-observe-logs-cluster-${cluster}`;
    this.title.label = `Logs: ${options.label}`;
    this.title.icon = observeIcon;
    this.title.closable = true;
    this.addClass('jp-DaskObserve-logs-tab');
    if (options.gone) {
      this.content.setGone(options.gone.current);
      options.gone.changed.connect(this._onGone, this);
      this._gone = options.gone.changed;
    }
  }

  dispose(): void {
    this._gone?.disconnect(this._onGone, this);
    this._stream.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this._stream.target === null) {
      // A live cluster starts near its newest lines; a run from its start.
      const after = this._target.run === undefined ? -LOG_TAIL : 0;
      this._stream.follow(this._target, after);
    }
  }

  private _onGone(_: unknown, gone: ReadonlySet<string>): void {
    this.content.setGone(gone);
  }

  private _gone: ISignal<unknown, ReadonlySet<string>> | null = null;
  private _stream: StoreStream;
  private _target: ITarget;
}

/**
 * The namespace for `LogsTab` statics.
 */
export namespace LogsTab {
  export interface IOptions {
    /**
     * The cluster or run whose logs it follows.
     */
    target: ITarget;
    /**
     * What the tab's title names: a cluster's address, or "run N".
     */
    label: string;
    /**
     * Lines kept at most; the oldest go first.
     */
    maxLines?: number;
    /**
     * The lowest level shown at first.
     */
    level?: string;
    /**
     * Workers that have left the cluster, and when that changes: their lines
     * are marked, as in the panel.
     */
    gone?: IGoneWorkers;
  }
}
