jest.mock('../data/api', () => ({}));
jest.mock('../data/stream', () => ({}));

import type { IRun } from '../data/api';
import { PolledList } from '../data/polledlist';
import { HistoryModel } from '../sections/history/model';

/** A while: the poll's ticks go on timers. */
function wait(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

describe('PolledList', () => {
  it('tells its items when they change, not on every refresh', async () => {
    const answers = [[1], [1], [1, 2]];
    const list = new PolledList<number>({
      fetch: async () => answers.shift() ?? [],
      active: false,
      name: 'test'
    });
    const told: (readonly number[])[] = [];
    list.changed.connect((_, items) => told.push(items));
    await list.refresh();
    await list.refresh();
    await list.refresh();
    expect(told).toEqual([[1], [1, 2]]);
    expect(list.items).toEqual([1, 2]);
    list.dispose();
  });

  it('does not poll while inactive, and refreshes at once when active', async () => {
    const fetch = jest.fn(async () => ['a']);
    const list = new PolledList<string>({
      fetch,
      interval: 60_000,
      active: false,
      name: 'test'
    });
    await wait(200); // an active poll would have fetched at once
    expect(fetch).not.toHaveBeenCalled();
    list.active = true;
    for (let i = 0; i < 200 && fetch.mock.calls.length === 0; i++) {
      await wait(10);
    }
    expect(fetch).toHaveBeenCalledTimes(1);
    expect(list.items).toEqual(['a']);
    list.dispose();
  });

  it('says why a refresh failed, and tells the items again after', async () => {
    const answers: (string[] | Error)[] = [['x'], new Error('down'), ['x']];
    const list = new PolledList<string>({
      fetch: async () => {
        const next = answers.shift();
        if (next instanceof Error) {
          throw next;
        }
        return next ?? [];
      },
      active: false,
      name: 'test'
    });
    const told: (readonly string[])[] = [];
    const failed: unknown[] = [];
    list.changed.connect((_, items) => told.push(items));
    list.failed.connect((_, why) => failed.push(why));
    await list.refresh();
    await expect(list.refresh()).rejects.toThrow('down');
    await list.refresh();
    // The same items after a failure are told again: a view that showed
    // the failure shows the list once more.
    expect(told).toEqual([['x'], ['x']]);
    expect(failed).toHaveLength(1);
    list.dispose();
  });
});

describe('HistoryModel', () => {
  /** Runs as the list has them: newest first. */
  function runs(...list: [number, string, string][]): IRun[] {
    return list.map(([id, name, status]) => ({ id, name, status }) as IRun);
  }

  it("follows the newest run's name, and reads again when its runs change", () => {
    const model = new HistoryModel();
    const show = jest.spyOn(model, 'show').mockResolvedValue();
    model.follow(runs([2, 'etl', 'running'], [1, 'etl', 'finished']));
    model.follow(runs([2, 'etl', 'running'], [1, 'etl', 'finished']));
    expect(show.mock.calls).toEqual([[2, true]]);
    model.follow(runs([2, 'etl', 'finished'], [1, 'etl', 'finished']));
    expect(show.mock.calls).toEqual([
      [2, true],
      [2, true]
    ]);
    model.dispose();
  });

  it('stays on a pinned run while runs of other names come', () => {
    const model = new HistoryModel();
    const show = jest.spyOn(model, 'show').mockResolvedValue();
    const before = runs([2, 'train', 'finished'], [1, 'etl', 'finished']);
    model.pin(1, before);
    expect(show.mock.calls).toEqual([[1, true]]);
    model.follow(runs([3, 'train', 'running'], ...before.map(asRow)));
    expect(show.mock.calls).toEqual([[1, true]]); // no other name's run
    model.follow(runs([4, 'etl', 'running'], ...before.map(asRow)));
    expect(show.mock.calls).toEqual([
      [1, true],
      [1, true]
    ]);
    model.pin(null, before); // the newest run's again
    expect(show.mock.calls[show.mock.calls.length - 1]).toEqual([2, true]);
    model.dispose();
  });

  it('stays on a pinned run once newer runs push it past the page fetched', () => {
    const model = new HistoryModel();
    const show = jest.spyOn(model, 'show').mockResolvedValue();
    model.pin(1, runs([2, 'train', 'finished'], [1, 'etl', 'finished']));
    // The panel fetches the newest page of runs: run 1 is no longer in it.
    model.follow(runs([3, 'train', 'finished'], [2, 'train', 'finished']));
    expect(show.mock.calls).toEqual([[1, true]]);
    model.dispose();
  });

  function asRow(run: IRun): [number, string, string] {
    return [run.id, run.name, run.status];
  }
});
