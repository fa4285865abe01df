import { FollowModel } from '../panel/follow';
import { cluster, run } from './fixtures';

/** The model, and every change it told, in order. */
function model(): [FollowModel, string[][]] {
  const follow = new FollowModel();
  const told: string[][] = [];
  follow.changed.connect((_, what) => told.push([...what].sort()));
  return [follow, told];
}

describe('FollowModel', () => {
  it('waits for the clusters before following the newest run', () => {
    const [follow, told] = model();
    follow.setRuns([run(2), run(1)]);
    expect(follow.target).toBeNull(); // a live cluster may yet be there
    expect(follow.flagsRun).toBe(2);
    follow.setClusters([]);
    expect(follow.target).toEqual({ run: 2 });
    expect(follow.subject).toBe('of run 2 (no live cluster)');
    expect(follow.live).toBe(false);
    expect(told).toEqual([['flags'], ['target']]);
  });

  it('follows the newest live cluster, and stays on it as runs come', () => {
    const [follow, told] = model();
    follow.setClusters([cluster('a', false), cluster('b', true)]);
    expect(follow.target).toEqual({ cluster: 'b' });
    expect(follow.live).toBe(true);
    follow.setRuns([run(1)]);
    follow.setRuns([run(2), run(1)]);
    expect(follow.target).toEqual({ cluster: 'b' });
    expect(follow.flagsRun).toBe(2);
    expect(told).toEqual([['target'], ['flags'], ['flags']]);
  });

  it('greys the workers of a followed cluster that died', () => {
    const [follow] = model();
    follow.setClusters([cluster('b', true)]);
    follow.setClusters([cluster('b', false)]);
    expect(follow.gone).toBe(true);
    expect(follow.target).toEqual({ cluster: 'b' }); // its last lines stay
  });

  it('replays a run until back to live', () => {
    const [follow, told] = model();
    follow.setClusters([cluster('b', true)]);
    follow.setRuns([run(5)]);
    follow.replay(3);
    expect(follow.target).toEqual({ run: 3 });
    expect(follow.flagsRun).toBe(3);
    expect(follow.replaying).toBe(3);
    follow.setRuns([run(6), run(5)]); // a new run: the replay stays
    follow.setClusters([cluster('c', true), cluster('b', true)]);
    expect(follow.target).toEqual({ run: 3 });
    expect(follow.flagsRun).toBe(3);
    told.length = 0;
    follow.backToLive();
    expect(follow.replaying).toBeNull();
    expect(follow.target).toEqual({ cluster: 'c' });
    expect(follow.flagsRun).toBe(6);
    expect(told).toEqual([['replay'], ['target'], ['flags']]);
  });
});
