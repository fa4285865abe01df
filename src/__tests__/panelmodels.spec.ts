import type { ICluster, IRun } from '../data/api';
import { cluster, run } from './fixtures';
import { LOG_TAIL, RUN_TAIL } from '../sections/logs/buffer';
import { PanelModels } from '../panel/panelmodels';
import { FakeSocket } from './fakesocket';

jest.mock('@jupyterlab/services', () =>
  jest.requireActual<typeof import('./fixtures')>('./fixtures').services()
);
jest.mock('@jupyterlab/coreutils', () => ({
  URLExt: { join: (...parts: string[]) => parts.join('/') }
}));
// What the server's lists hold: the test sets them, a refresh reads them.
const lists: { clusters: ICluster[]; runs: IRun[] } = {
  clusters: [],
  runs: []
};
jest.mock('../data/api', () => ({
  fetchClusters: async () => lists.clusters,
  fetchRuns: async (limit: number) => ({
    runs: lists.runs.slice(0, limit),
    total: lists.runs.length
  }),
  fetchArchive: async () => ({ archive: null, runs: [] }),
  fetchHistory: async () => ({ runs: [] })
}));

/** What the panel's one socket was last asked for, by kinds of stream. */
function subscribed(socket: FakeSocket): Record<string, unknown> {
  const latest: Record<string, Record<string, unknown>> = {};
  for (const message of socket.sent) {
    if (message.type === 'subscribe') {
      const rest = { ...message };
      delete rest.id;
      delete rest.type;
      delete rest.kinds;
      latest[(message.kinds as string[]).join('+')] = rest;
    }
  }
  return latest;
}

let models: PanelModels;

beforeEach(() => {
  FakeSocket.made = [];
  lists.clusters = [];
  lists.runs = [];
  models = new PanelModels({ metricsWindow: 120 });
});

afterEach(() => models.dispose());

async function polled(): Promise<void> {
  await models.clusters.refresh();
  await models.runs.refresh();
}

describe('PanelModels', () => {
  it('follows a live cluster from its recent past, on one socket', async () => {
    lists.clusters = [cluster('old', false), cluster('live', true)];
    lists.runs = [run(3), run(2)];
    await polled();
    expect(FakeSocket.made).toHaveLength(1);
    const socket = FakeSocket.made[0];
    socket.open();
    expect(subscribed(socket)).toEqual({
      logs: { cluster: 'live', after: -LOG_TAIL },
      'metrics+events': { cluster: 'live', after: 0, since: 120 },
      flags: { run: 3, after: 0 }
    });
  });

  it('replays a run from near its end, then goes back to the live cluster', async () => {
    lists.clusters = [cluster('live', true)];
    lists.runs = [run(3), run(2)];
    await polled();
    const socket = FakeSocket.made[0];
    socket.open();
    models.follow.replay(2);
    expect(subscribed(socket)).toEqual({
      logs: { run: 2, after: -RUN_TAIL },
      'metrics+events': { run: 2, after: 0 },
      flags: { run: 2, after: 0 }
    });
    models.follow.backToLive();
    expect(subscribed(socket)).toEqual({
      logs: { cluster: 'live', after: -LOG_TAIL },
      'metrics+events': { cluster: 'live', after: 0, since: 120 },
      flags: { run: 3, after: 0 }
    });
    expect(FakeSocket.made).toHaveLength(1);
  });

  it('with no live cluster, shows the newest run (its logs from near its end)', async () => {
    lists.runs = [run(5), run(4)];
    await polled();
    const socket = FakeSocket.made[0];
    socket.open();
    expect(subscribed(socket)).toEqual({
      logs: { run: 5, after: -RUN_TAIL },
      'metrics+events': { run: 5, after: 0 },
      flags: { run: 5, after: 0 }
    });
    expect(models.clusterList).toEqual([]);
  });

  it('polls its lists only while active, at the interval set', () => {
    expect(models.clusters.active).toBe(false);
    models.active = true;
    expect(
      [models.clusters, models.runs, models.team].map(m => m.active)
    ).toEqual([true, true, true]);
    models.configure({ refreshInterval: 1234 });
    expect(models.clusters.interval).toBe(1234);
    expect(models.runs.interval).toBe(1234);
    // A long interval for the runs; clusters come and go within 2 s still.
    models.configure({ refreshInterval: 60_000 });
    expect(models.clusters.interval).toBe(2000);
    expect(models.runs.interval).toBe(60_000);
    models.active = false;
    expect(models.runs.active).toBe(false);
  });
});
