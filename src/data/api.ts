import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IArchiveRun, ICluster, IHistory, IRun } from './payloads';

// The payloads' types, generated from the server's (see payloads.ts).
export type {
  IArchiveRun,
  ICluster,
  IEvent,
  IEvidence,
  IFlag,
  IHistory,
  IHistoryRun,
  ILogLine,
  IMetric,
  IRun
} from './payloads';

/**
 * Call a route under `<base_url>dask-observe/api/` and return its JSON body.
 *
 * The request carries the page's Jupyter credentials (ServerConnection adds the
 * token and the XSRF cookie), since every route of the extension is authenticated.
 */
export async function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'dask-observe', 'api', endPoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const body = text.length > 0 ? JSON.parse(text) : null;
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, body?.message ?? text);
  }
  return body as T;
}

/**
 * The newest `limit` recorded runs, newest first, and how many there are.
 */
export interface IRunsPage {
  runs: IRun[];
  total: number;
}

/**
 * The newest `limit` runs (the cards the panel shows: the whole list of a
 * year's runs was 268 KiB at each poll).
 */
export async function fetchRuns(limit: number): Promise<IRunsPage> {
  return requestAPI<IRunsPage>(`runs?limit=${Math.max(1, Math.floor(limit))}`);
}

/**
 * The team's archive: where it is (null: none is set where Jupyter runs),
 * its newest runs, how many it holds, and how many of its entries the server
 * skipped as not valid runs (anyone who can write the archive wrote them).
 */
export interface IArchivePage {
  archive: string | null;
  runs: IArchiveRun[];
  total: number;
  skipped: number;
}

/**
 * The archive's newest `limit` runs (the cards the Team section shows).
 */
export async function fetchArchive(limit: number): Promise<IArchivePage> {
  return requestAPI<IArchivePage>(
    `archive/runs?limit=${Math.max(1, Math.floor(limit))}`
  );
}

/**
 * The clusters recorders watch or watched, most recently seen first.
 */
export async function fetchClusters(): Promise<ICluster[]> {
  const body = await requestAPI<{ clusters: ICluster[] }>('clusters');
  return body.clusters;
}

/**
 * The history of the name of that run.
 */
export async function fetchHistory(runId: number): Promise<IHistory> {
  return requestAPI<IHistory>(`runs/${runId}/history`);
}
