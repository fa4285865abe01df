/**
 * A time the server gives in epoch seconds, as a Date.
 */
export function fromEpoch(seconds: number): Date {
  return new Date(seconds * 1000);
}

/**
 * "512 B", "1.5 KiB", "3.2 GiB": binary units, as Dask's own dashboard shows them.
 */
/**
 * The browser's own formats of a time and a date, made once: `toLocale*String`
 * builds its formatter anew at each call (0.15 ms each: a panel opening over
 * a store drew a few hundred of them), and these print the same.
 */
const TIME = new Intl.DateTimeFormat([], {
  hour: 'numeric',
  minute: 'numeric',
  second: 'numeric'
});
const TIME_24H = new Intl.DateTimeFormat([], {
  hour: 'numeric',
  minute: 'numeric',
  second: 'numeric',
  hour12: false
});
const DATE_TIME = new Intl.DateTimeFormat([], {
  year: 'numeric',
  month: 'numeric',
  day: 'numeric',
  hour: 'numeric',
  minute: 'numeric',
  second: 'numeric'
});

/**
 * A time of day as `toLocaleTimeString()` writes it (`h24`: on a 24-hour
 * clock, compact for the logs).
 */
export function clockTime(seconds: number, h24 = false): string {
  return (h24 ? TIME_24H : TIME).format(fromEpoch(seconds));
}

/**
 * A date and time as `toLocaleString()` writes it.
 */
export function dateTime(seconds: number): string {
  return DATE_TIME.format(fromEpoch(seconds));
}

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
