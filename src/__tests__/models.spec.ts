jest.mock('../api', () => ({}));
jest.mock('../stream', () => ({}));

import { PolledList } from '../models';

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
