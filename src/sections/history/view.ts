import { Widget } from '@lumino/widgets';

import type { IHistoryRun } from '../../data/api';
import { element, heading, svg } from '../../ui/dom';
import { formatBytes, formatSeconds } from '../../ui/format';
import type { HistoryModel } from './model';

const WIDTH = 240;
const HEIGHT = 64;
/**
 * Room for the value axis on the left and the run ids below.
 */
const LEFT = 34;
const BOTTOM = 12;

/**
 * The trend of one job: wall time and peak memory of the runs sharing the
 * selected run's name, oldest to newest, each point marked with its verdict
 * against the runs before it, and a dashed line where the environment changed
 * (hover it, or read the list below, for what changed).
 *
 * Run names and changes are user text: written with `textContent` only.
 */
export class HistoryView extends Widget {
  constructor(model: HistoryModel) {
    super();
    this.addClass('jp-DaskObserve-history');
    this._model = model;
    const head = heading('History');
    this._title = element('div', 'jp-DaskObserve-history-title');
    this._charts = element('div', 'jp-DaskObserve-history-charts');
    this._notes = element('ul', 'jp-DaskObserve-history-notes');
    this.node.append(head, this._title, this._charts, this._notes);
    model.changed.connect(this._render, this);
    this._render();
  }

  private _render(): void {
    const { runId, history, error, reading } = this._model;
    if (runId === null) {
      this._title.textContent = 'No run selected.';
      return;
    }
    this.node.dataset.runId = String(runId);
    if (reading) {
      if (this._charts.childElementCount === 0) {
        this._title.textContent = `Reading the history of run ${runId}…`;
      }
      return;
    }
    if (error !== null) {
      this._title.textContent = `Cannot read the history: ${error}`;
      return;
    }
    if (history === null) {
      return;
    }
    const runs = history.runs;
    this._title.textContent =
      `${history.name}: ${runs.length} run${runs.length === 1 ? '' : 's'}` +
      (runs.length < 2 ? ' (record it again to see a trend)' : '');
    // One run is no trend: its figures as a line of text, not two charts of
    // a point each (150 px that pushed the runs below the fold at 900 px).
    const only = runs.length === 1 ? runs[0] : null;
    this._charts.replaceChildren(
      ...(only !== null
        ? [Private.figures(only)]
        : [
            Private.chart(runs, {
              label: 'wall time',
              value: r => r.duration_s,
              format: formatSeconds,
              verdict: r => r.verdict,
              prefixes: r => r.prefixes ?? {}
            }),
            // Its own verdict: marked with the wall time's, a run whose wall
            // time alone regressed read as a memory regression too.
            Private.chart(runs, {
              label: 'peak memory',
              value: r => r.peak_memory,
              format: formatBytes,
              verdict: r => r.memory_verdict ?? '',
              prefixes: () => ({})
            })
          ])
    );
    this._notes.replaceChildren(
      ...runs
        .filter(
          r =>
            r.verdict !== '' ||
            (r.memory_verdict ?? '') !== '' ||
            r.changed.length > 0 ||
            Object.keys(r.prefixes ?? {}).length > 0
        )
        .map(r => Private.note(r))
    );
  }

  private _charts: HTMLDivElement;
  private _model: HistoryModel;
  private _notes: HTMLUListElement;
  private _title: HTMLDivElement;
}

namespace Private {
  /**
   * One figure a history charts: its value of a run, and the verdicts that
   * mark a run's point (the figure's own, and per task prefix).
   */
  export interface IFigure {
    label: string;
    value: (run: IHistoryRun) => number | null;
    format: (value: number) => string;
    verdict: (run: IHistoryRun) => string;
    prefixes: (run: IHistoryRun) => Record<string, string>;
  }

  /**
   * A single run's wall time and peak memory, as text.
   */
  export function figures(run: IHistoryRun): HTMLDivElement {
    const wall = run.duration_s === null ? '–' : formatSeconds(run.duration_s);
    const peak = run.peak_memory === null ? '–' : formatBytes(run.peak_memory);
    return element(
      'div',
      'jp-DaskObserve-history-figures',
      `wall time ${wall} · peak memory ${peak}`
    );
  }

  /**
   * One figure over the runs: a line through the known values, a point a run
   * (class and data attributes say its verdict), a dashed rule where the
   * environment changed. Built with DOM calls only.
   */
  export function chart(runs: IHistoryRun[], figure: IFigure): HTMLDivElement {
    const { label, value, format } = figure;
    const box = element('div', 'jp-DaskObserve-history-chart');
    box.dataset.chart = label;
    const caption = element('span', 'jp-DaskObserve-chart-label', label);
    const known = runs.filter(r => value(r) !== null);
    const top = Math.max(...known.map(r => value(r) as number), 0) || 1;
    const span = WIDTH - LEFT - 8;
    const x = (i: number): number =>
      runs.length < 2
        ? LEFT + 4 + span / 2
        : LEFT + 4 + (i / (runs.length - 1)) * span;
    const floor = HEIGHT - BOTTOM - 2;
    const y = (v: number): number => floor - (v / top) * (floor - 6);
    const picture = svg('svg', {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      class: 'jp-DaskObserve-history-svg',
      role: 'img',
      'aria-label': `${label} of each run`
    });
    // Axes: the value scale on the left, the first and last run ids below.
    picture.append(
      svg('line', {
        x1: String(LEFT),
        x2: String(LEFT),
        y1: '2',
        y2: String(floor),
        class: 'jp-DaskObserve-history-axis-line'
      }),
      Private.label(format(top), LEFT - 3, y(top) + 3, 'end'),
      Private.label(format(0), LEFT - 3, floor, 'end')
    );
    if (runs.length > 0) {
      const last = runs.length - 1;
      picture.append(
        Private.label(`#${runs[0].id}`, x(0), HEIGHT - 1, 'middle')
      );
      if (last > 0) {
        picture.append(
          Private.label(`#${runs[last].id}`, x(last), HEIGHT - 1, 'end')
        );
      }
    }
    runs.forEach((run, i) => {
      if (run.changed.length > 0) {
        const rule = svg('line', {
          x1: String(x(i)),
          x2: String(x(i)),
          y1: '0',
          y2: String(HEIGHT),
          class: 'jp-DaskObserve-history-change'
        });
        const title = svg('title');
        title.textContent = `#${run.id} changed: ${run.changed.join('; ')}`;
        rule.append(title);
        picture.append(rule);
      }
    });
    const line = runs
      .map((run, i) => [i, value(run)] as const)
      .filter(([, v]) => v !== null)
      .map(([i, v]) => `${x(i).toFixed(1)},${y(v as number).toFixed(1)}`);
    if (line.length > 1) {
      picture.append(svg('polyline', { points: line.join(' ') }));
    }
    runs.forEach((run, i) => {
      const v = value(run);
      if (v === null) {
        return;
      }
      const slower = Object.entries(figure.prefixes(run)).map(
        ([name, verdict]) => `${name} ${verdict}`
      );
      const verdict = figure.verdict(run);
      const point = svg('circle', {
        cx: x(i).toFixed(1),
        cy: y(v).toFixed(1),
        r: verdict || slower.length > 0 ? '3.5' : '2.5',
        class: 'jp-DaskObserve-history-point',
        'data-run-id': String(run.id),
        'data-verdict': verdict,
        'data-prefixes': slower.join(', ')
      });
      const title = svg('title');
      title.textContent =
        `#${run.id}: ${format(v)}` +
        (verdict ? ` (${verdict})` : '') +
        (slower.length > 0 ? `; per task: ${slower.join(', ')}` : '');
      point.append(title);
      picture.append(point);
    });
    const newest = known[known.length - 1];
    const shown = element(
      'span',
      'jp-DaskObserve-chart-value',
      newest ? format(value(newest) as number) : '–'
    );
    box.append(caption, shown, picture);
    return box;
  }

  /**
   * An axis label (text content only: run ids and figures, never markup).
   */
  export function label(
    text: string,
    x: number,
    y: number,
    anchor: 'start' | 'middle' | 'end'
  ): SVGElement {
    const found = svg('text', {
      x: x.toFixed(1),
      y: y.toFixed(1),
      'text-anchor': anchor,
      class: 'jp-DaskObserve-history-axis'
    });
    found.textContent = text;
    return found;
  }

  /**
   * "#5 regression: wall time 2.10 s; changed: config a.b: None -> 4s".
   */
  export function note(run: IHistoryRun): HTMLLIElement {
    const item = element('li', 'jp-DaskObserve-history-note');
    item.dataset.runId = String(run.id);
    // Coloured as its wall time's verdict, else its peak memory's.
    item.dataset.verdict = run.verdict || (run.memory_verdict ?? '');
    const parts = [`#${run.id}`];
    if (run.verdict) {
      const wall =
        run.duration_s === null ? '' : ` (${formatSeconds(run.duration_s)})`;
      parts.push(`wall time ${run.verdict}${wall}`);
    }
    // Per task, against the prefix's own spread over the earlier runs: a
    // prefix that is always noisy is not named, a stable one that doubled is.
    const prefixes = Object.entries(run.prefixes ?? {}).sort(([a], [b]) =>
      a.localeCompare(b)
    );
    if (prefixes.length > 0) {
      parts.push(
        prefixes
          .map(([name, verdict]) => `${name} per task ${verdict}`)
          .join(', ')
      );
    }
    if (run.memory_verdict) {
      const peak =
        run.peak_memory === null ? '' : ` (${formatBytes(run.peak_memory)})`;
      parts.push(`peak memory ${run.memory_verdict}${peak}`);
    }
    if (run.changed.length > 0) {
      parts.push(`changed: ${run.changed.join('; ')}`);
    }
    item.textContent = parts.join(' · ');
    return item;
  }
}
