import type { ILogLine } from '../data/api';
import { StreamConnection } from '../data/connection';
import { StreamStatus } from '../panel/status';
import type { ConnectionState } from '../data/stream';
import { StoreStream } from '../data/stream';
import { FakeSocket } from './fakesocket';

jest.mock('@jupyterlab/services', () =>
  jest.requireActual<typeof import('./fixtures')>('./fixtures').services()
);
jest.mock('@jupyterlab/coreutils', () => ({
  URLExt: { join: (...parts: string[]) => parts.join('/') }
}));
const requestAPI = jest.fn();
jest.mock('../data/api', () => ({
  requestAPI: (...args: unknown[]) => requestAPI(...args)
}));

function line(seq: number): ILogLine {
  return {
    seq,
    time: seq,
    level: 'INFO',
    source: 'worker',
    worker: null,
    logger: 'distributed.worker',
    message: `line ${seq}`,
    task: null,
    fields: null
  };
}

function batch(...seqs: number[]): Record<string, unknown> {
  return { type: 'batch', last: seqs[seqs.length - 1], logs: seqs.map(line) };
}

/** Until promises queued now (a gap's REST reads) have settled. */
async function settled(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await Promise.resolve();
  }
}

let stream: StoreStream;
let received: number[];

beforeEach(() => {
  FakeSocket.made = [];
  requestAPI.mockReset();
  stream = new StoreStream();
  received = [];
  stream.lines.connect((_, lines) => received.push(...lines.map(l => l.seq)));
});

afterEach(() => {
  stream.dispose();
  jest.useRealTimers();
});

describe('StoreStream', () => {
  it('subscribes to what it follows and delivers lines in store order', () => {
    stream.follow({ run: 7 });
    const socket = FakeSocket.made[0];
    expect(socket.url).toBe('ws://lab//dask-observe/api/stream');
    socket.open();
    expect(socket.sent).toEqual([
      {
        type: 'subscribe',
        kinds: ['logs'],
        after: 0,
        run: 7,
        id: expect.any(String)
      }
    ]);
    socket.say({ type: 'subscribed', after: 0 });
    expect(stream.state).toBe('open');
    socket.say(batch(1, 2));
    socket.say(batch(3));
    expect(received).toEqual([1, 2, 3]);
  });

  it('reconnects after a dropped connection and resumes after the last row', () => {
    jest.useFakeTimers();
    const states: ConnectionState[] = [];
    stream.stateChanged.connect((_, state) => states.push(state));
    stream.follow({ cluster: 'abc' }, -500);
    const first = FakeSocket.made[0];
    first.open();
    first.say({ type: 'subscribed' });
    first.say(batch(10, 11, 12));
    first.drop();
    expect(stream.state).toBe('reconnecting');
    jest.advanceTimersByTime(499);
    expect(FakeSocket.made).toHaveLength(1); // 0.5 s before the first retry
    jest.advanceTimersByTime(1);
    const second = FakeSocket.made[1];
    second.open();
    // Not -500 again: exactly after what arrived.
    expect(second.sent[0]).toMatchObject({ after: 12, cluster: 'abc' });
    second.drop(); // again: twice the wait
    jest.advanceTimersByTime(999);
    expect(FakeSocket.made).toHaveLength(2);
    jest.advanceTimersByTime(1);
    const third = FakeSocket.made[2];
    third.open();
    third.say({ type: 'subscribed' });
    third.say(batch(13));
    expect(received).toEqual([10, 11, 12, 13]);
    expect(states).toEqual(['connecting', 'open', 'reconnecting', 'open']);
  });

  it('fills a gap over REST in its place, before what came after it', async () => {
    let answer: (rows: unknown) => void = () => undefined;
    requestAPI.mockImplementationOnce(
      () => new Promise(resolve => (answer = resolve))
    );
    const gaps: unknown[] = [];
    stream.gaps.connect((_, gap) => gaps.push(gap));
    stream.follow({ run: 1 });
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'subscribed' });
    socket.say(batch(1, 2));
    socket.say({ type: 'gap', after: 2, upto: 5 });
    socket.say(batch(6, 7)); // arrives while the gap is being read
    await settled();
    expect(received).toEqual([1, 2]); // 6 and 7 wait for the gap's rows
    const asked = String(requestAPI.mock.calls[0][0]);
    expect(asked).toContain('stream/rows?');
    expect(new URLSearchParams(asked.split('?')[1]).get('upto')).toBe('5');
    answer({ last: 5, logs: [3, 4, 5].map(line) });
    await settled();
    expect(received).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(gaps).toEqual([{ after: 2, upto: 5, filled: true }]);
  });

  it('says a gap it could not fill, and goes on', async () => {
    requestAPI.mockRejectedValueOnce(new Error('server gone'));
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    const gaps: unknown[] = [];
    stream.gaps.connect((_, gap) => gaps.push(gap));
    stream.follow({ run: 1 });
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'gap', after: 0, upto: 3 });
    socket.say(batch(4));
    await settled();
    expect(gaps).toEqual([{ after: 0, upto: 3, filled: false }]);
    expect(received).toEqual([4]);
    warn.mockRestore();
  });

  it('ignores frames of the subscription a new follow() replaced', () => {
    stream.follow({ run: 1 });
    const socket = FakeSocket.made[0];
    socket.open();
    const old = socket.newest();
    stream.follow({ run: 2 });
    // One socket: the old subscription ended, the new one began on it.
    expect(FakeSocket.made).toHaveLength(1);
    expect(socket.sent.slice(1)).toEqual([
      { type: 'unsubscribe', id: old },
      expect.objectContaining({ type: 'subscribe', run: 2, after: 0 })
    ]);
    socket.say(batch(1, 2, 3), old); // still on its way
    expect(received).toEqual([]);
    socket.say(batch(4));
    expect(received).toEqual([4]);
  });

  it('shares one socket between streams, each with its own rows', () => {
    jest.useFakeTimers();
    const connection = new StreamConnection();
    const logs = new StoreStream(['logs'], connection);
    const metrics = new StoreStream(['metrics', 'events'], connection);
    const lines: number[] = [];
    const samples: number[] = [];
    logs.lines.connect((_, got) => lines.push(...got.map(l => l.seq)));
    metrics.metrics.connect((_, got) => samples.push(...got.map(m => m.seq)));
    logs.follow({ cluster: 'c' }, -100);
    metrics.follow({ cluster: 'c' }, 0, 300);
    expect(FakeSocket.made).toHaveLength(1);
    const socket = FakeSocket.made[0];
    socket.open();
    const [forLogs, forMetrics] = socket.sent.map(m => String(m.id));
    expect(forLogs).not.toBe(forMetrics);
    expect(socket.sent[1]).toMatchObject({
      kinds: ['metrics', 'events'],
      since: 300
    });
    socket.say(batch(5, 6), forLogs);
    const sample = { seq: 7, time: 7, worker: null, name: 'cpu', value: 1 };
    socket.say({ type: 'batch', last: 7, metrics: [sample] }, forMetrics);
    expect(lines).toEqual([5, 6]);
    expect(samples).toEqual([7]);
    // A drop: one socket again, both subscriptions from where they were.
    socket.drop();
    expect(logs.state).toBe('reconnecting');
    expect(metrics.state).toBe('reconnecting');
    jest.advanceTimersByTime(500);
    expect(FakeSocket.made).toHaveLength(2);
    const again = FakeSocket.made[1];
    again.open();
    expect(again.sent).toEqual([
      expect.objectContaining({ id: forLogs, after: 6 }),
      expect.objectContaining({ id: forMetrics, after: 7 })
    ]);
    logs.dispose();
    expect(again.sent[2]).toEqual({ type: 'unsubscribe', id: forLogs });
    metrics.dispose();
    connection.dispose();
    expect(again.closed).toBe(true);
  });

  it('tells why the server refused a subscription', () => {
    const failures: string[] = [];
    stream.failed.connect((_, why) => failures.push(why));
    stream.follow({ run: 99 });
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'error', message: 'no such run' });
    expect(failures).toEqual(['no such run']);
  });

  it("says beside a view's heading when its rows stop or go missing", async () => {
    requestAPI.mockRejectedValueOnce(new Error('server gone'));
    const warn = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    const status = new StreamStatus(stream);
    stream.follow({ run: 3 });
    expect(status.node.textContent).toBe('(connecting…)');
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'subscribed' });
    expect(status.node.textContent).toBe('');
    socket.say({ type: 'gap', after: 0, upto: 9 });
    await settled();
    expect(status.node.textContent).toBe('(some rows could not be read)');
    socket.say({ type: 'error', message: 'the store is gone' });
    expect(status.node.textContent).toBe('(the store is gone)');
    stream.follow({ run: 4 }); // starts over: nothing missing yet
    expect(status.node.textContent).toBe('(connecting…)');
    status.dispose();
    warn.mockRestore();
  });
});
