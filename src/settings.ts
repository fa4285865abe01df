/**
 * The panel's settings (the `dask-observe:plugin` schema).
 */
export interface IPanelSettings {
  /**
   * Milliseconds between refreshes of the clusters and runs lists, and at most
   * one redraw of the metrics per such interval (capped at one second).
   */
  refreshInterval: number;
  /**
   * Log lines kept in the browser; the oldest go first.
   */
  logBufferSize: number;
  /**
   * The lowest log level shown when the panel opens.
   */
  defaultLevel: string;
  /**
   * Seconds of metrics the sparklines span.
   */
  metricsWindow: number;
}

/**
 * What the panel starts with until the settings registry has loaded the
 * user's: the schema's defaults (``schema/plugin.json``; a unit test holds
 * them to it).
 */
export const DEFAULT_SETTINGS: IPanelSettings = {
  refreshInterval: 5000,
  logBufferSize: 100_000,
  defaultLevel: 'DEBUG',
  metricsWindow: 300
};
