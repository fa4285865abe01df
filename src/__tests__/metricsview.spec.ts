import { Widget } from '@lumino/widgets';

import { MetricsView } from '../sections/metrics/view';
import { MetricsModel } from '../sections/metrics/model';
import type { StoreStream } from '../data/stream';
import { FakeMetricStream, sample } from './fixtures';

jest.mock('../data/stream', () => ({}));
jest.mock('../panel/status', () => ({
  StreamStatus: class {
    node = document.createElement('span');
    dispose(): void {
      /* nothing held */
    }
  }
}));

function clock(seconds: number): string {
  return new Date(seconds * 1000).toLocaleTimeString();
}

/** A view of two workers that ran tasks at t=100; the cluster closed at 105. */
function closedCluster(): [MetricsView, FakeMetricStream] {
  jest.useFakeTimers();
  const stream = new FakeMetricStream();
  const model = new MetricsModel({
    stream: stream as unknown as StoreStream,
    windowSeconds: 600
  });
  const view = new MetricsView({ model, refreshInterval: 0 });
  Widget.attach(view, document.body);
  const t = 1_700_000_100;
  stream.metrics.emit([
    sample(t, null, 'workers', 2),
    sample(t, null, 'nthreads', 4),
    sample(t, null, 'tasks_processing', 3),
    sample(t, null, 'memory_managed', 2 ** 20),
    sample(t, 'tcp://a:1', 'cpu', 36),
    sample(t, 'tcp://a:1', 'tasks_processing', 1),
    sample(t, 'tcp://b:1', 'cpu', 80),
    sample(t, 'tcp://b:1', 'tasks_processing', 2),
    // The cluster's last sample, as its workers left: none.
    sample(t + 5, null, 'workers', 0),
    sample(t + 5, null, 'nthreads', 0),
    sample(t + 5, null, 'tasks_processing', 0),
    sample(t + 5, null, 'memory_managed', 0)
  ]);
  jest.runAllTimers();
  return [view, stream];
}

function text(view: MetricsView): string {
  return view.node.textContent ?? '';
}

describe('MetricsView', () => {
  afterEach(() => {
    jest.useRealTimers();
    document.body.replaceChildren();
  });

  it('says what the workers do now while the cluster lives', () => {
    const [view] = closedCluster();
    expect(text(view)).toContain('processing');
    expect(text(view)).toContain('CPU 36%');
    expect(text(view)).not.toContain('last seen');
  });

  it('never shows a cluster that went away as live', () => {
    const [view] = closedCluster();
    view.live = false;
    jest.runAllTimers();
    const t = 1_700_000_100;
    // Nothing reads as current: no task processing, no CPU.
    const rows = view.node.querySelector('.jp-DaskObserve-workerList')!;
    expect(rows.textContent).not.toContain('processing');
    expect(rows.textContent).not.toContain('CPU');
    const charts = view.node.querySelector('.jp-DaskObserve-charts-title')!;
    expect(charts.textContent).toBe(
      `Whole cluster, the 10 min until ${clock(t + 5)}`
    );
    // The cluster's last figures while it had workers, and when.
    expect(text(view)).not.toMatch(/\d+ processing/);
    const summary = view.node.querySelector('.jp-DaskObserve-metrics-summary')!;
    expect(summary.textContent).toBe(
      `last seen ${clock(t + 5)}: 2 workers, 4 threads, 1.0 MiB of 0 B (at ${clock(t)})`
    );
    const seen = Array.from(
      view.node.querySelectorAll('.jp-DaskObserve-worker-seen')
    );
    expect(seen.map(s => s.textContent)).toEqual([
      `last seen ${clock(t)}`,
      `last seen ${clock(t)}`
    ]);
    expect(view.node.classList).toContain('jp-mod-past');
    // Live again (another cluster followed): as before.
    view.live = true;
    jest.runAllTimers();
    expect(text(view)).toContain('CPU 80%');
    expect(
      view.node.querySelectorAll('.jp-DaskObserve-worker-seen').length
    ).toBe(0);
  });
});
