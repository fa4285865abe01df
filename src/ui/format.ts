/**
 * A time the server gives in epoch seconds, as a Date.
 */
export function fromEpoch(seconds: number): Date {
  return new Date(seconds * 1000);
}

/**
 * "512 B", "1.5 KiB", "3.2 GiB": binary units, as Dask's own dashboard shows them.
 */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0
    ? `${Math.round(value)} B`
    : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/**
 * "0.42 s", "12.3 s", "4 min 05 s".
 */
export function formatSeconds(seconds: number): string {
  if (seconds < 10) {
    return `${seconds.toFixed(2)} s`;
  }
  if (seconds < 60) {
    return `${seconds.toFixed(1)} s`;
  }
  const minutes = Math.floor(seconds / 60);
  const rest = Math.round(seconds % 60);
  return `${minutes} min ${String(rest).padStart(2, '0')} s`;
}
