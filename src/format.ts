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
