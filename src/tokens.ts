import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';
import type { Widget } from '@lumino/widgets';

/**
 * Command ids live under the `dask-observe:` prefix.
 */
export namespace CommandIDs {
  export const openPanel = 'dask-observe:open-panel';
  export const openReport = 'dask-observe:open-report';
  export const openDashboard = 'dask-observe:open-dashboard';
  export const openComparison = 'dask-observe:open-comparison';
  export const openArchiveReport = 'dask-observe:open-archive-report';
  export const openArchiveComparison = 'dask-observe:open-archive-comparison';
  export const openLogs = 'dask-observe:open-logs';
  export const openLiveLogs = 'dask-observe:open-live-logs';
  export const openNewestReport = 'dask-observe:open-newest-report';
  export const backToLive = 'dask-observe:back-to-live';
  /**
   * Opens a main-area tab again after a reload, as the layout restorer
   * saved it: `{ command, args }` of the command that first opened it.
   */
  export const restoreTab = 'dask-observe:restore-tab';
}

/**
 * Workers that left a cluster, for views that mark their lines.
 */
export interface IGoneWorkers {
  /**
   * Their addresses now.
   */
  readonly current: ReadonlySet<string>;
  /**
   * Told when one leaves (or comes back).
   */
  readonly changed: ISignal<unknown, ReadonlySet<string>>;
}

/**
 * What the dask-observe plugin offers other extensions.
 */
export interface IDaskObserve {
  /**
   * The side panel (DOM id `dask-observe-panel`).
   */
  readonly panel: Widget;
  /**
   * Show a run's logs, metrics and flags in the panel in place of the live
   * ones.
   */
  replay(runId: number): void;
  /**
   * Follow the newest live cluster and run again.
   */
  live(): void;
}

/**
 * The token of the dask-observe panel.
 */
export const IDaskObserve = new Token<IDaskObserve>(
  'dask-observe:IDaskObserve',
  'The Dask Observe side panel: replay a recorded run in it, or go back to live.'
);
