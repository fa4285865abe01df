import { MetricsModel } from '../sections/metrics/model';
import type { StoreStream } from '../data/stream';
import { FakeMetricStream, sample } from './fixtures';

jest.mock('../data/stream', () => ({}));

function model(): [MetricsModel, FakeMetricStream] {
  const stream = new FakeMetricStream();
  const made = new MetricsModel({
    stream: stream as unknown as StoreStream,
    windowSeconds: 60
  });
  return [made, stream];
}

describe('MetricsModel', () => {
  it('keeps the samples it draws, per worker and for the cluster', () => {
    const [metrics, stream] = model();
    const added: string[] = [];
    metrics.workerAdded.connect((_, worker) => added.push(worker));
    stream.metrics.emit([
      sample(100, 'tcp://b:1', 'cpu', 50),
      sample(100, 'tcp://a:1', 'cpu', 20),
      sample(100, null, 'workers', 2),
      sample(100, 'tcp://a:1', 'not-drawn', 9)
    ]);
    expect(metrics.workers()).toEqual(['tcp://a:1', 'tcp://b:1']);
    expect(added).toEqual(['tcp://b:1', 'tcp://a:1']);
    expect(metrics.series('tcp://a:1')?.latest()?.get('cpu')).toBe(20);
    expect(metrics.series('tcp://a:1')?.latest()?.has('not-drawn')).toBe(false);
    expect(metrics.series(null)?.latest()?.get('workers')).toBe(2);
    expect(metrics.newest).toBe(100);
  });

  it('holds a value until the worker sends another', () => {
    const [metrics, stream] = model();
    stream.metrics.emit([
      sample(100, 'tcp://a:1', 'cpu', 20),
      sample(100, 'tcp://a:1', 'tasks_processing', 3)
    ]);
    // Between heartbeats only the task count comes.
    stream.metrics.emit([sample(101, 'tcp://a:1', 'tasks_processing', 1)]);
    const series = metrics.series('tcp://a:1');
    expect(series?.times).toEqual([100, 101]);
    expect(series?.latest()?.get('cpu')).toBe(20);
    expect(series?.latest()?.get('tasks_processing')).toBe(1);
    expect(series?.samples[0].get('tasks_processing')).toBe(3);
  });

  it('forgets samples older than its window, and workers with none left', () => {
    const [metrics, stream] = model();
    stream.metrics.emit([sample(100, 'tcp://old:1', 'cpu')]);
    stream.events.emit([
      {
        seq: 1,
        time: 101,
        kind: 'worker-removed',
        worker: 'tcp://old:1',
        data: {}
      }
    ]);
    expect(metrics.gone.has('tcp://old:1')).toBe(true);
    stream.metrics.emit([sample(200, 'tcp://new:1', 'cpu')]); // 100 s later
    expect(metrics.workers()).toEqual(['tcp://new:1']);
    expect(metrics.gone.size).toBe(0);
  });

  it('tells who left and who came back, and starts over on a new subject', () => {
    const [metrics, stream] = model();
    const gone: string[][] = [];
    const redraws: boolean[] = [];
    // As a logs tab reads them, through the token's interface.
    const goneWorkers = metrics.goneWorkers;
    goneWorkers.changed.connect((_, left) => gone.push([...left]));
    metrics.changed.connect((_, now) => redraws.push(now));
    stream.metrics.emit([sample(1, 'tcp://w:1', 'cpu')]);
    const event = (kind: string) => ({
      seq: 2,
      time: 2,
      kind,
      worker: 'tcp://w:1',
      data: {}
    });
    stream.events.emit([event('worker-removed')]);
    expect([...goneWorkers.current]).toEqual(['tcp://w:1']);
    stream.events.emit([event('worker-removed')]); // said once
    stream.events.emit([event('worker-added')]);
    expect(gone).toEqual([['tcp://w:1'], []]);
    expect(redraws).toEqual([false, true, true]);
    stream.reset.emit({ run: 3 });
    expect(metrics.workers()).toEqual([]);
    expect(redraws[redraws.length - 1]).toBe(true);
    metrics.dispose();
  });
});
