import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { observeIcon } from './icon';

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
 * A page of a registered cluster's dashboard, through the server's proxy. The
 * bokeh page needs its scripts and a same-origin websocket; the proxy reaches
 * only dashboards that a recorder registered.
 */
export function dashboardTab(
  clusterId: string,
  page: string
): MainAreaWidget<IFrame> {
  return frameTab(
    `dask-observe/dashboard/${encodeURIComponent(clusterId)}/${encodeURIComponent(page)}`,
    `Dask ${page}`,
    `dask-observe-dashboard-${clusterId}-${page}`,
    ['allow-scripts', 'allow-same-origin']
  );
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
