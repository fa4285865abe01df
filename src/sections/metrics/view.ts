import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { element, heading, patchList, svg } from '../../ui/dom';
import { clockTime, formatBytes } from '../../ui/format';
import { StreamStatus } from '../../panel/status';
import type { MetricsModel, Sample, Series } from './model';

/**
 * One sparkline: what it plots from a worker's (or the cluster's) samples.
 */
interface IChart {
  label: string;
  unit: 'bytes' | 'percent' | 'count' | 'bytes/s';
  value: (s: Sample, cluster: boolean) => number | undefined;
}

const CHARTS: IChart[] = [
  {
    label: 'memory',
    unit: 'bytes',
    value: s => add(s.get('memory_managed'), s.get('memory_unmanaged'))
  },
  { label: 'CPU', unit: 'percent', value: s => s.get('cpu') },
  {
    label: 'processing',
    unit: 'count',
    value: s => s.get('tasks_processing')
  },
  {
    label: 'network',
    unit: 'bytes/s',
    value: (s, cluster) =>
      cluster
        ? s.get('net_bps')
        : add(s.get('net_read_bps'), s.get('net_write_bps'))
  }
];

function add(a?: number, b?: number): number | undefined {
  return a === undefined && b === undefined ? undefined : (a ?? 0) + (b ?? 0);
}

/**
 * Workers of the followed cluster, each with a memory bar (managed, unmanaged
 * and spilled against its limit), CPU and tasks processing; below them
 * sparklines of memory, CPU, tasks processing and network over the last
 * minutes, for the whole cluster or for the worker picked in the list.
 *
 * It draws its model (samples and workers: `MetricsModel`); workers that
 * left the cluster stay listed, greyed. Redraws at most once per
 * `refreshInterval`, whatever the sample rate.
 */
export class MetricsView extends Widget {
  constructor(options: MetricsView.IOptions) {
    super();
    this.addClass('jp-DaskObserve-metrics');
    this.model = options.model;
    this.refreshInterval = options.refreshInterval ?? 1000;

    const head = heading('Workers');
    this._summary = element('span', 'jp-DaskObserve-metrics-summary');
    this._status = new StreamStatus(options.model.stream);
    head.append(' ', this._summary, ' ', this._status.node);
    this._workers = element('ul', 'jp-DaskObserve-workerList');
    this._chartsTitle = element('div', 'jp-DaskObserve-charts-title');
    this._charts = element('div', 'jp-DaskObserve-charts');
    this.node.append(head, this._workers, this._chartsTitle, this._charts);

    this.model.changed.connect((_, now) => this._schedule(now), this);
    this.model.stream.reset.connect(() => (this._selected = null), this);
    this._redraw();
  }

  /**
   * What it draws.
   */
  readonly model: MetricsModel;

  /**
   * Milliseconds between redraws at most.
   */
  refreshInterval: number;

  /**
   * The worker whose charts show, or null for the whole cluster.
   */
  get selected(): string | null {
    return this._selected;
  }

  set selected(worker: string | null) {
    this._selected = worker;
    this._schedule(true);
  }

  /**
   * Whether what it shows is happening now: false for a cluster that went
   * away and for a replayed run. Then nothing reads as current: no task
   * "processing", no CPU; each worker and the cluster say when they were
   * last seen, with the last figures they had while they had workers.
   */
  get live(): boolean {
    return this._live;
  }

  set live(live: boolean) {
    if (live !== this._live) {
      this._live = live;
      this.node.classList.toggle('jp-mod-past', !live);
      this._schedule(true);
    }
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    this._status.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._schedule(true);
  }

  /**
   * Redraw soon: at once when asked (a click, a worker leaving), else at the
   * next refresh tick.
   */
  private _schedule(now: boolean): void {
    if (this._timer !== 0 && !now) {
      return;
    }
    window.clearTimeout(this._timer);
    const wait = now
      ? 0
      : Math.max(0, this._drawn + this.refreshInterval - Date.now());
    this._timer = window.setTimeout(() => {
      this._timer = 0;
      this._drawn = Date.now();
      this._redraw();
    }, wait);
  }

  private _redraw(): void {
    if (!this.isVisible && this._drawn !== 0) {
      return; // drawn again when shown
    }
    const model = this.model;
    const workers = model.workers();
    const [cluster, at] = this._live
      ? [model.series(null)?.latest(), null]
      : Private.lastWithWorkers(model.series(null));
    if (cluster) {
      const used = add(
        cluster.get('memory_managed'),
        cluster.get('memory_unmanaged')
      );
      const memory = `${formatBytes(used ?? 0)} of ${formatBytes(cluster.get('memory_limit') ?? 0)}`;
      this._summary.textContent = this._live
        ? `${cluster.get('workers') ?? 0} workers, ` +
          `${cluster.get('nthreads') ?? 0} threads, ` +
          `${cluster.get('tasks_processing') ?? 0} processing, ${memory}`
        : `last seen ${Private.clock(model.newest)}: ` +
          `${cluster.get('workers') ?? 0} workers, ` +
          `${cluster.get('nthreads') ?? 0} threads, ${memory}` +
          (at !== null && at < model.newest
            ? ` (at ${Private.clock(at)})`
            : '');
    } else if (!this._live && workers.length) {
      this._summary.textContent = `last seen ${Private.clock(model.newest)}`;
    } else {
      this._summary.textContent = workers.length ? '' : 'no samples yet';
    }
    if (this._selected !== null && !model.series(this._selected)) {
      this._selected = null;
    }
    // Rows patched in place: redrawn every second, a row replaced between the
    // press and the release lost the click that selects its worker.
    patchList(
      this._workers,
      workers.map(worker => this._workerRow(worker)),
      'data-worker'
    );
    const span = `${this._live ? 'last' : 'the'} ${Math.round(model.windowSeconds / 60)} min`;
    const until = this._live ? '' : ` until ${Private.clock(model.newest)}`;
    this._chartsTitle.textContent =
      this._selected === null
        ? `Whole cluster, ${span}${until}`
        : `Worker ${this._selected}${until}`;
    const series = model.series(this._selected);
    // Nothing sampled yet: no empty charts under "no samples yet".
    const empty = series === undefined && workers.length === 0;
    this._chartsTitle.hidden = empty;
    this._charts.hidden = empty;
    this._charts.replaceChildren(
      ...CHARTS.map(chart =>
        Private.sparkline(
          chart,
          series,
          this._selected === null,
          model.newest,
          model.windowSeconds
        )
      )
    );
  }

  private _workerRow(worker: string): HTMLLIElement {
    const series = this.model.series(worker)!;
    const sample = series.latest() ?? new Map();
    const item = element('li', 'jp-DaskObserve-worker');
    item.dataset.worker = worker;
    const gone = this.model.gone.has(worker);
    // A worker that left, or any worker of a cluster that did: its last
    // figures, said as such, never as what it does now.
    const past = gone || !this._live;
    item.classList.toggle('jp-mod-gone', gone);
    item.classList.toggle('jp-mod-selected', worker === this._selected);
    item.title = gone
      ? `${worker} has left the cluster`
      : `${worker}: click to chart it`;
    item.addEventListener('click', () => {
      this.selected = this._selected === worker ? null : worker;
    });

    const name = element(
      'span',
      'jp-DaskObserve-worker-name',
      worker.replace(/^\w+:\/\//, '')
    );
    const limit = sample.get('memory_limit') ?? 0;
    const spilled = sample.get('memory_spilled') ?? 0;
    // Process memory against the limit; data spilled to disk is not in
    // memory, and is said apart, never added to the bar.
    const parts: [string, number][] = [
      ['managed', sample.get('memory_managed') ?? 0],
      ['unmanaged', sample.get('memory_unmanaged') ?? 0]
    ];
    const used = parts[0][1] + parts[1][1];
    const bar = element('div', 'jp-DaskObserve-membar');
    // Against the limit; a worker without one is drawn against what it holds.
    const scale = limit > 0 ? Math.max(limit, used) : used || 1;
    for (const [part, bytes] of parts) {
      const segment = element('div', `jp-DaskObserve-membar-${part}`);
      segment.dataset.bytes = String(bytes);
      segment.style.width = `${((100 * bytes) / scale).toFixed(2)}%`;
      bar.append(segment);
    }
    bar.title =
      parts.map(([p, v]) => `${p} ${formatBytes(v)}`).join(', ') +
      (limit > 0 ? ` of a ${formatBytes(limit)} limit` : ' (no limit)') +
      (spilled > 0 ? `; ${formatBytes(spilled)} spilled to disk` : '');
    const numbers = element('div', 'jp-DaskObserve-worker-numbers');
    numbers.append(
      element(
        'span',
        'jp-DaskObserve-worker-memory',
        limit > 0
          ? `${formatBytes(used)} / ${formatBytes(limit)}`
          : formatBytes(used)
      )
    );
    if (!past) {
      numbers.append(
        element(
          'span',
          'jp-DaskObserve-worker-cpu',
          `CPU ${Math.round(sample.get('cpu') ?? 0)}%`
        ),
        element(
          'span',
          'jp-DaskObserve-worker-processing',
          `${sample.get('tasks_processing') ?? 0} processing`
        )
      );
    }
    if (spilled > 0) {
      numbers.append(
        element(
          'span',
          'jp-DaskObserve-worker-spilled',
          `${formatBytes(spilled)} spilled`
        )
      );
    }
    if (gone) {
      numbers.append(element('span', 'jp-DaskObserve-worker-gone', 'gone'));
    }
    if (past) {
      const seen = series.times[series.times.length - 1];
      numbers.append(
        element(
          'span',
          'jp-DaskObserve-worker-seen',
          seen === undefined ? 'never seen' : `last seen ${Private.clock(seen)}`
        )
      );
    }
    item.append(name, bar, numbers);
    return item;
  }

  private _charts: HTMLDivElement;
  private _chartsTitle: HTMLDivElement;
  private _drawn = 0;
  private _live = true;
  private _selected: string | null = null;
  private _status: StreamStatus;
  private _summary: HTMLSpanElement;
  private _timer = 0;
  private _workers: HTMLUListElement;
}

/**
 * The namespace for `MetricsView` statics.
 */
export namespace MetricsView {
  export interface IOptions {
    /**
     * The samples and workers to draw.
     */
    model: MetricsModel;
    /**
     * Milliseconds between redraws at most (default 1000).
     */
    refreshInterval?: number;
  }
}

namespace Private {
  const WIDTH = 120;
  const HEIGHT = 28;

  /**
   * A sample's time (seconds since the epoch) as a clock reads it.
   */
  export function clock(seconds: number): string {
    return clockTime(seconds);
  }

  /**
   * The cluster's last sample that had workers, and its time: a closed
   * cluster's (or a finished run's) very last sample is taken as its
   * workers leave, and reads "0 workers, 0 B of 0 B".
   */
  export function lastWithWorkers(
    series: Series | undefined
  ): [Sample | undefined, number | null] {
    if (!series) {
      return [undefined, null];
    }
    for (let i = series.samples.length - 1; i >= 0; i--) {
      if ((series.samples[i].get('workers') ?? 0) > 0) {
        return [series.samples[i], series.times[i]];
      }
    }
    const last = series.samples.length - 1;
    return last >= 0
      ? [series.samples[last], series.times[last]]
      : [undefined, null];
  }

  function shown(value: number, unit: IChart['unit']): string {
    switch (unit) {
      case 'bytes':
        return formatBytes(value);
      case 'bytes/s':
        return `${formatBytes(value)}/s`;
      case 'percent':
        return `${Math.round(value)}%`;
      default:
        return String(Math.round(value));
    }
  }

  /**
   * A labelled sparkline with the newest value; built with DOM calls only.
   */
  export function sparkline(
    chart: IChart,
    series: Series | undefined,
    cluster: boolean,
    newest: number,
    windowSeconds: number
  ): HTMLDivElement {
    const points: [number, number][] = [];
    if (series) {
      for (let i = 0; i < series.times.length; i++) {
        const value = chart.value(series.samples[i], cluster);
        if (value !== undefined && series.times[i] >= newest - windowSeconds) {
          points.push([series.times[i], value]);
        }
      }
    }
    const box = element('div', 'jp-DaskObserve-chart');
    box.dataset.chart = chart.label;
    const last = points[points.length - 1];
    box.dataset.value = last ? String(last[1]) : '';
    const label = element('span', 'jp-DaskObserve-chart-label', chart.label);
    const value = element(
      'span',
      'jp-DaskObserve-chart-value',
      last ? shown(last[1], chart.unit) : '–'
    );
    const picture = svg('svg', {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      preserveAspectRatio: 'none',
      class: 'jp-DaskObserve-sparkline'
    });
    if (points.length > 1) {
      const top = Math.max(...points.map(p => p[1])) || 1;
      // A history shorter than the window fills the width.
      const start = points[0][0];
      const span = Math.max(newest - start, 1e-3);
      const xy = points.map(
        ([t, v]) =>
          `${(((t - start) / span) * WIDTH).toFixed(1)},` +
          `${(HEIGHT - 1 - (v / top) * (HEIGHT - 2)).toFixed(1)}`
      );
      picture.append(svg('polyline', { points: xy.join(' ') }));
    }
    box.append(label, value, picture);
    return box;
  }
}
