import { clockTime, dateTime } from '../ui/format';

describe('clockTime and dateTime', () => {
  it("print what the browser's toLocale*String print", () => {
    // Across a year, on the hour and off it, mornings and afternoons.
    for (let i = 0; i < 400; i++) {
      const seconds = 1_764_750_000 + i * 86_413.7;
      const date = new Date(seconds * 1000);
      expect(clockTime(seconds)).toBe(date.toLocaleTimeString());
      expect(clockTime(seconds, true)).toBe(
        date.toLocaleTimeString([], { hour12: false })
      );
      expect(dateTime(seconds)).toBe(date.toLocaleString());
    }
  });
});
