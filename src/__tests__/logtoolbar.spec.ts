import type { ILogLine } from '../data/api';
import { SHOW_ALL } from '../sections/logs/buffer';
import { LogsToolbar } from '../sections/logs/toolbar';

function line(message: string, worker: string | null = null): ILogLine {
  return {
    seq: 1,
    time: 0,
    level: 'WARNING',
    source: 'worker',
    worker,
    logger: 'distributed.worker',
    message,
    task: null,
    fields: null
  };
}

/** The toolbar's matcher after typing `text` in its filter box. */
function typed(text: string): (l: ILogLine) => boolean {
  const bar = new LogsToolbar();
  const box = bar.node.querySelector<HTMLInputElement>(
    '.jp-DaskObserve-logs-filter'
  )!;
  box.value = text;
  return bar.matcher();
}

describe('LogsToolbar.matcher', () => {
  it('finds the text in any case, in the message or the worker', () => {
    const matches = typed('LINE 012');
    expect(matches(line('line 0123 of a stream'))).toBe(true);
    expect(matches(line('line 0999'))).toBe(false);
    const worker = typed('127.0.0.1:40123');
    expect(worker(line('started', 'tcp://127.0.0.1:40123'))).toBe(true);
    expect(worker(line('started', 'tcp://127.0.0.1:40999'))).toBe(false);
  });

  it("finds a task's key: the lines that task printed", () => {
    const matches = typed("('sum-3f2a', 7)");
    const printed = { ...line('processing'), task: "('sum-3f2a', 7)" };
    expect(matches(printed)).toBe(true);
    expect(matches({ ...printed, task: "('sum-3f2a', 8)" })).toBe(false);
    expect(matches(line('processing'))).toBe(false);
  });

  it("finds a logging call's extra fields: the lines of one partition", () => {
    const matches = typed('"table": "orders"');
    const logged = { ...line('loaded 3 rows'), fields: '{"table": "orders"}' };
    expect(matches(logged)).toBe(true);
    expect(matches({ ...logged, fields: '{"table": "items"}' })).toBe(false);
    expect(matches(line('loaded 3 rows'))).toBe(false);
  });

  it('shows what tasks printed or warned as sources of their own', () => {
    const bar = new LogsToolbar();
    const source = bar.node.querySelector<HTMLSelectElement>(
      '.jp-DaskObserve-logs-source'
    )!;
    const printed = { ...line('processing partition 3'), logger: 'stdout' };
    const warned = { ...line('a deprecated call'), logger: 'py.warnings' };
    const logged = line('a worker says');
    const shown = (value: string) => {
      source.value = value;
      const matches = bar.matcher();
      return [printed, warned, logged]
        .filter(l => matches(l))
        .map(l => l.message);
    };
    expect(shown('stdout')).toEqual(['processing partition 3']);
    expect(shown('warning')).toEqual(['a deprecated call']);
    expect(shown('stderr')).toEqual([]);
    // A worker's lines hold what its tasks wrote too.
    expect(shown('worker')).toHaveLength(3);
    expect(shown('scheduler')).toEqual([]);
  });

  it('takes the text literally, not as a pattern', () => {
    const matches = typed('a.b (c)');
    expect(matches(line('x a.b (c) y'))).toBe(true);
    expect(matches(line('x axb c y'))).toBe(false);
  });

  it('passes every line, of any level, with nothing chosen', () => {
    const bar = new LogsToolbar();
    expect(bar.matcher()).toBe(SHOW_ALL); // the buffer shows all at once
    const odd = { ...line('a line of a custom level'), level: 'Level 5' };
    expect(bar.matcher()(odd)).toBe(true);
    bar.level = 'INFO';
    expect(bar.matcher()).not.toBe(SHOW_ALL);
    expect(bar.matcher()(odd)).toBe(false);
    expect(bar.matcher()(line('a warning'))).toBe(true);
  });
});

describe('LogsToolbar, a pattern that is not one', () => {
  it('says what is wrong where it was typed, and filters nothing out', () => {
    const bar = new LogsToolbar();
    const box = bar.node.querySelector<HTMLInputElement>(
      '.jp-DaskObserve-logs-filter'
    )!;
    const regex = bar.node.querySelector<HTMLInputElement>(
      'input[type="checkbox"]'
    )!;
    const problem = bar.node.querySelector<HTMLElement>(
      '.jp-DaskObserve-logs-problem'
    )!;
    expect(problem.hidden).toBe(true);
    regex.checked = true;
    box.value = 'worker (tcp';
    const matches = bar.matcher();
    expect(matches(line('anything at all'))).toBe(true);
    expect(problem.hidden).toBe(false);
    expect(problem.textContent).toMatch(
      /^Not a regular expression \(.*(unterminated|group).*\): showing every line\.$/i
    );
    expect(box.getAttribute('aria-invalid')).toBe('true');

    box.value = 'worker \\(tcp';
    expect(bar.matcher()(line('worker (tcp://a)'))).toBe(true);
    expect(bar.matcher()(line('scheduler'))).toBe(false);
    expect(problem.hidden).toBe(true);
    expect(box.hasAttribute('aria-invalid')).toBe(false);
  });
});
