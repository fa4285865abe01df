import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * A run as the server's `dask-observe/api/runs` route returns it.
 * Times are seconds since the epoch.
 */
export interface IRun {
  id: number;
  name: string;
  status: 'running' | 'finished' | 'failed' | 'interrupted';
  started: number;
  ended: number | null;
  duration_s: number | null;
  n_tasks: number;
  n_failed: number;
  n_flags: number;
  cluster: string | null;
  /** Why the run was recorded only partially; null when recorded fully. */
  partial: string | null;
  /** Workers the run lost (died), from its verdict. */
  n_lost: number;
  /** Its tasks still running when it ended (counted in n_tasks). */
  n_running: number;
}

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
 * A run of the team's archive (`observe.archive`), as
 * `dask-observe/api/archive/runs` lists it: its id is the archive's.
 */
export interface IArchiveRun {
  id: string;
  name: string;
  status: 'running' | 'finished' | 'failed' | 'interrupted';
  started: number;
  ended: number | null;
  duration_s: number | null;
  n_tasks: number;
  n_failed: number;
  n_flags: number;
  cluster: string | null;
  partial: string | null;
  n_lost: number;
  n_running: number;
  /** The machine that recorded it, and who. */
  host: string | null;
  user: string | null;
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
 * A cluster a recorder watched, as `dask-observe/api/clusters` returns it.
 */
export interface ICluster {
  id: string;
  address: string;
  dashboard: string | null;
  first_seen: number;
  last_seen: number;
  alive: boolean;
  /**
   * When its scheduler last answered (epoch seconds), once it stopped
   * answering while its connection held (a frozen scheduler); null while it
   * answers.
   */
  silent_since: number | null;
  /**
   * Where the clients that watch it were made: each process's notebook (its
   * path in Jupyter), or its program; those still open while it is live,
   * else the last ones that were.
   */
  notebooks: string[];
}

/**
 * The clusters recorders watch or watched, most recently seen first.
 */
export async function fetchClusters(): Promise<ICluster[]> {
  const body = await requestAPI<{ clusters: ICluster[] }>('clusters');
  return body.clusters;
}

/**
 * A run in the history of its name (`dask-observe/api/runs/<id>/history`).
 */
export interface IHistoryRun {
  id: number;
  started: number;
  status: IRun['status'];
  duration_s: number | null;
  /** Bytes the workers held together at most; null when unknown. */
  peak_memory: number | null;
  /** The wall time against the runs before: "", "regression" or "improvement". */
  verdict: string;
  /** What differs from the previous run's environment, one line each. */
  changed: string[];
  /** Task prefixes whose time a task left their own spread over the earlier
   * runs: prefix -> "regression" or "improvement". */
  prefixes: Record<string, string>;
}

/**
 * The runs sharing a name, oldest first (the newest 50 at most).
 */
export interface IHistory {
  name: string;
  runs: IHistoryRun[];
}

/**
 * The history of the name of that run.
 */
export async function fetchHistory(runId: number): Promise<IHistory> {
  return requestAPI<IHistory>(`runs/${runId}/history`);
}

/**
 * A log line as the stream sends it.
 */
export interface ILogLine {
  seq: number;
  time: number;
  level: string;
  source: string;
  worker: string | null;
  logger: string;
  message: string;
  /**
   * The key of the task whose thread wrote the line (null outside tasks).
   */
  task: string | null;
  /**
   * A logging call's extra fields, as a JSON object (null without any).
   */
  fields: string | null;
}

/**
 * A flag as the stream sends it.
 */
export interface IFlag {
  time: number;
  kind: string;
  severity: 'info' | 'warning' | 'error';
  worker: string | null;
  message: string;
  advice: string;
  evidence: { time: number; worker: string | null; text: string }[];
}

/**
 * A metric sample as the stream sends it: one value of one worker (or of the
 * whole cluster when `worker` is null).
 */
export interface IMetric {
  seq: number;
  time: number;
  worker: string | null;
  name: string;
  value: number;
}

/**
 * A lifecycle event as the stream sends it (worker-added, worker-removed, ...).
 */
export interface IEvent {
  seq: number;
  time: number;
  kind: string;
  worker: string | null;
  data: Record<string, unknown>;
}
