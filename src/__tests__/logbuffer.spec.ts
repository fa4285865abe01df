import type { ILogLine } from '../data/api';
import { LogBuffer, SHOW_ALL } from '../sections/logs/buffer';

function line(seq: number, message = `line ${seq}`): ILogLine {
  return {
    seq,
    time: seq,
    level: seq % 2 ? 'WARNING' : 'INFO',
    source: 'worker',
    worker: 'tcp://127.0.0.1:1',
    logger: 'distributed.worker',
    message,
    task: null,
    fields: null
  };
}

/** Buffers made by a test, disposed after it (their ports would hold Node). */
const made: LogBuffer[] = [];

function newBuffer(maxLines: number): LogBuffer {
  const buffer = new LogBuffer(maxLines);
  made.push(buffer);
  return buffer;
}

afterEach(() => made.splice(0).forEach(b => b.dispose()));

/** Until the buffer's filter is done (it goes on a slice per task). */
async function filtered(buffer: LogBuffer): Promise<void> {
  while (buffer.filtering !== null) {
    await new Promise(resolve => setTimeout(resolve, 1));
  }
}

describe('LogBuffer', () => {
  it('keeps the newest lines up to its size, oldest first', () => {
    const buffer = newBuffer(3);
    buffer.append([line(1), line(2)]);
    buffer.append([line(3), line(4)]);
    expect(buffer.all.map(l => l.seq)).toEqual([2, 3, 4]);
    expect(buffer.shown.map(l => l.seq)).toEqual([2, 3, 4]);
  });

  it('filters what it holds and what arrives after', async () => {
    const buffer = newBuffer(100);
    buffer.append([line(1), line(2), line(3)]);
    buffer.setFilter(l => l.level === 'WARNING');
    await filtered(buffer);
    expect(buffer.shown.map(l => l.seq)).toEqual([1, 3]);
    buffer.append([line(4), line(5)]);
    expect(buffer.shown.map(l => l.seq)).toEqual([1, 3, 5]);
  });

  it('takes 300,000 lines in one append', () => {
    const buffer = newBuffer(1_000_000);
    buffer.append(Array.from({ length: 300_000 }, (_, i) => line(i + 1)));
    expect(buffer.all).toHaveLength(300_000);
    expect(buffer.shown).toHaveLength(300_000);
  });

  it('filters a large buffer in slices, each line once, in order', async () => {
    const buffer = newBuffer(300_000);
    buffer.append(Array.from({ length: 300_000 }, (_, i) => line(i + 1)));
    // A filter that takes a little time a line (as a regular expression over
    // long lines does): 300,000 lines take longer than one slice.
    let spent = 0;
    buffer.setFilter(l => {
      for (let k = 0; k < 300; k++) {
        spent += k;
      }
      return l.seq % 1000 === 0;
    });
    // Not done at once: the first slice leaves the rest to later tasks, and
    // what is shown meanwhile is what passed the filter before.
    expect(buffer.filtering).not.toBeNull();
    expect(buffer.shown).toHaveLength(300_000);
    await filtered(buffer);
    const shown = buffer.shown.map(l => l.seq);
    expect(shown).toHaveLength(300);
    expect(shown).toEqual([...shown].sort((a, b) => a - b));
    expect(spent).toBeGreaterThan(0);
  });

  it('drops the oldest lines while a filter is under way, and only those', async () => {
    const buffer = newBuffer(200_000);
    buffer.append(Array.from({ length: 200_000 }, (_, i) => line(i + 1)));
    buffer.setFilter(l => l.seq % 10 === 0);
    // Lines arrive while the filter goes on: the oldest 50,000 go.
    buffer.append(Array.from({ length: 50_000 }, (_, i) => line(200_001 + i)));
    await filtered(buffer);
    const shown = buffer.shown.map(l => l.seq);
    expect(shown[0]).toBe(50_010);
    expect(shown[shown.length - 1]).toBe(250_000);
    expect(shown).toHaveLength(20_000);
  });

  it('shows the whole buffer at once when the filter is cleared', async () => {
    const buffer = newBuffer(300_000);
    buffer.append(Array.from({ length: 300_000 }, (_, i) => line(i + 1)));
    buffer.setFilter(l => l.seq % 1000 === 0);
    await filtered(buffer);
    expect(buffer.shown).toHaveLength(300);
    // Cleared while another filter is under way: that one's slices stop.
    buffer.setFilter(l => l.seq % 7 === 0);
    buffer.setFilter(SHOW_ALL);
    expect(buffer.filtering).toBeNull();
    expect(buffer.shown).toHaveLength(300_000);
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(buffer.shown).toHaveLength(300_000);
    buffer.append([line(300_001)]);
    expect(buffer.shown[buffer.shown.length - 1].seq).toBe(300_001);
    expect(buffer.shown[0].seq).toBe(2); // the oldest left both
  });

  it('says when it changed', () => {
    const buffer = newBuffer(10);
    let told = 0;
    buffer.changed.connect(() => (told += 1));
    buffer.append([line(1)]);
    buffer.clear();
    expect(told).toBe(2);
    expect(buffer.all).toHaveLength(0);
  });
});
