jest.mock('../data/api', () => ({}));
jest.mock('../data/stream', () => ({}));

import { TeamModel } from '../sections/team/model';
import { TeamView } from '../sections/team/view';
import { archived } from './fixtures';

async function settled(): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, 0));
}

describe('TeamView, a year of published runs', () => {
  it('draws the newest page of cards, and more on demand', async () => {
    const runs = Array.from({ length: 40 }, (_, i) => archived(40 - i));
    const asked: number[] = [];
    // As the server answers: the newest `limit` runs, and how many there are.
    const model = new TeamModel({
      fetchPage: async limit => {
        asked.push(limit);
        return {
          archive: 's3://team/runs',
          runs: runs.slice(0, limit),
          total: runs.length,
          skipped: 0
        };
      },
      active: false
    });
    const shown = new TeamView({
      model,
      openReport: () => undefined,
      openComparison: () => undefined
    });
    await model.refresh();
    const status = shown.node.querySelector('.jp-DaskObserve-team-status')!;
    const more = shown.node.querySelector<HTMLButtonElement>(
      '.jp-DaskObserve-team-more'
    )!;
    const cards = (): number =>
      shown.node.querySelectorAll('.jp-DaskObserve-run').length;
    expect(cards()).toBe(25);
    expect(status.textContent).toBe(
      '40 runs in s3://team/runs, the newest 25 shown'
    );
    expect(more.hidden).toBe(false);
    expect(more.textContent).toBe('Show 15 more of 15');
    more.click(); // fetched: the server answers the cards shown
    await settled();
    expect(cards()).toBe(40);
    expect(more.hidden).toBe(true);
    expect(status.textContent).toBe('40 runs in s3://team/runs');
    expect(asked).toEqual([25, 50]);
  });
});
