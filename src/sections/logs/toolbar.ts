import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';

import { element, styledSelect } from '../../ui/dom';
import type { ILogLine } from '../../data/api';
import type { LineFilter } from './buffer';
import { SHOW_ALL } from './buffer';

const LEVELS: Record<string, number> = {
  DEBUG: 10,
  INFO: 20,
  WARNING: 30,
  ERROR: 40,
  CRITICAL: 50
};

/**
 * What tasks wrote, offered as sources of their own: a worker's lines of
 * these loggers (what they printed to stdout and stderr, the warnings they
 * raised), as the server's `source` filter takes them.
 */
export const OUTPUT_SOURCES: Record<string, string> = {
  stdout: 'stdout',
  stderr: 'stderr',
  'py.warnings': 'warning'
};

/**
 * The controls above a log list: text (or regular expression) filter, lowest
 * level, source (or what tasks printed or warned), worker, follow, and the count of lines shown. It owns no
 * lines: it says what to show (`matcher`) and when that changed.
 */
export class LogsToolbar {
  constructor(level = 'DEBUG') {
    this.node = element('div', 'jp-DaskObserve-logs-bar');
    this._filter = element('input', 'jp-mod-styled jp-DaskObserve-logs-filter');
    this._filter.type = 'search';
    this._filter.placeholder = 'filter';
    this._regex = Private.checkbox('regex', false);
    this._level = element(
      'select',
      'jp-DaskObserve-select jp-DaskObserve-logs-level'
    );
    for (const name of ['DEBUG', 'INFO', 'WARNING', 'ERROR']) {
      this._level.append(new Option(name.toLowerCase() + '+', name));
    }
    this._level.value = level;
    this._source = Private.select('source', [
      'scheduler',
      'worker',
      'nanny',
      ...new Set(Object.values(OUTPUT_SOURCES))
    ]);
    this._worker = Private.select('worker', []);
    this._follow = Private.checkbox('follow', true);
    this._count = element('span', 'jp-DaskObserve-logs-count');
    // Why the filter filters nothing, where it was typed (a bad pattern).
    this._problem = element('div', 'jp-DaskObserve-logs-problem');
    this._problem.setAttribute('role', 'alert');
    this._problem.hidden = true;
    this.node.append(
      this._filter,
      this._regex.parentElement!,
      styledSelect(this._level),
      styledSelect(this._source),
      styledSelect(this._worker),
      this._follow.parentElement!,
      this._count,
      this._problem
    );
    const controls = [
      this._filter,
      this._regex,
      this._level,
      this._source,
      this._worker
    ];
    for (const control of controls) {
      control.addEventListener('input', () => this._changed.emit());
    }
    this._follow.addEventListener('change', () =>
      this._followChanged.emit(this._follow.checked)
    );
  }

  /**
   * The bar's element.
   */
  readonly node: HTMLDivElement;

  /**
   * Told when a filter control changed (`matcher` says what to show now).
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Told when the user ticks or unticks "follow".
   */
  get followChanged(): ISignal<this, boolean> {
    return this._followChanged;
  }

  /**
   * Whether the list keeps the newest line in view.
   */
  get follow(): boolean {
    return this._follow.checked;
  }

  set follow(value: boolean) {
    this._follow.checked = value;
  }

  /**
   * The lowest level shown (DEBUG, INFO, WARNING or ERROR).
   */
  get level(): string {
    return this._level.value;
  }

  set level(value: string) {
    this._level.value = value;
    this._changed.emit();
  }

  /**
   * Offer this worker in the worker filter (whether or not it logged yet).
   */
  addWorker(worker: string): void {
    if (!this._workers.has(worker)) {
      this._workers.add(worker);
      this._worker.append(new Option(worker, worker));
    }
  }

  /**
   * Offer no worker (the stream starts over).
   */
  clearWorkers(): void {
    this._workers.clear();
    this._worker.replaceChildren(this._worker.options[0]);
  }

  /**
   * Say how many lines show, or how far a filter under way got (0 to 1).
   */
  showCount(shown: number, all: number, filtering: number | null): void {
    this._count.textContent =
      filtering === null
        ? `${shown.toLocaleString()} of ${all.toLocaleString()} lines`
        : `filtering… ${Math.floor(100 * filtering)} %`;
    this._count.dataset.filtering = String(filtering !== null);
  }

  /**
   * What the controls ask to show. An invalid regular expression filters
   * nothing out (the user may still be typing it) and says what is wrong
   * with it under the box.
   */
  matcher(): LineFilter {
    // The lowest level is every line, those of levels without a name too.
    const level = LEVELS[this._level.value] ?? 0;
    const anyLevel = level <= LEVELS.DEBUG;
    const text = this._filter.value;
    // The text: looked for in the message, in the worker (or source)
    // column, in the key of the task that wrote the line and in its fields
    // (a logging call's extra, as JSON), any case. A case-insensitive pattern tests each string as it
    // is; lowering a copy of each line (and joining who and message first)
    // allocated two strings a line: a million lines filtered in 128 ms
    // against 49 ms (node, the same V8).
    let test: (line: ILogLine) => boolean = () => true;
    this._showProblem(null);
    if (text && this._regex.checked) {
      try {
        const pattern = new RegExp(text);
        test = line =>
          pattern.test(`${line.worker ?? line.source} ${line.message}`) ||
          (!!line.task && pattern.test(line.task)) ||
          (!!line.fields && pattern.test(line.fields));
      } catch (error) {
        // The browser's own words: "Unterminated group", "Nothing to repeat".
        const why = (error as Error).message.replace(
          /^Invalid regular expression: /,
          ''
        );
        this._showProblem(
          `Not a regular expression (${why}): showing every line.`
        );
      }
    } else if (text) {
      const pattern = new RegExp(Private.escape(text), 'i');
      test = line =>
        pattern.test(line.message) ||
        pattern.test(line.worker ?? line.source) ||
        (!!line.task && pattern.test(line.task)) ||
        (!!line.fields && pattern.test(line.fields));
    }
    const source = this._source.value;
    const worker = this._worker.value;
    if (anyLevel && !text && !source && !worker) {
      return SHOW_ALL;
    }
    return line =>
      (anyLevel || (LEVELS[line.level] ?? 0) >= level) &&
      (!source ||
        line.source === source ||
        OUTPUT_SOURCES[line.logger] === source) &&
      (!worker || line.worker === worker) &&
      test(line);
  }

  private _showProblem(problem: string | null): void {
    this._filter.classList.toggle('jp-mod-invalid', problem !== null);
    if (problem === null) {
      this._filter.removeAttribute('aria-invalid');
    } else {
      this._filter.setAttribute('aria-invalid', 'true');
    }
    this._problem.textContent = problem ?? '';
    this._problem.hidden = problem === null;
  }

  /**
   * Forget the listeners (the view is disposed).
   */
  dispose(): void {
    Signal.clearData(this);
  }

  private _changed = new Signal<this, void>(this);
  private _count: HTMLSpanElement;
  private _problem: HTMLDivElement;
  private _filter: HTMLInputElement;
  private _follow: HTMLInputElement;
  private _followChanged = new Signal<this, boolean>(this);
  private _level: HTMLSelectElement;
  private _regex: HTMLInputElement;
  private _source: HTMLSelectElement;
  private _worker: HTMLSelectElement;
  private _workers = new Set<string>();
}

namespace Private {
  /**
   * `text` as a pattern that matches it literally.
   */
  export function escape(text: string): string {
    return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  }

  /**
   * A checkbox inside its label (the label is its parent).
   */
  export function checkbox(label: string, checked: boolean): HTMLInputElement {
    const box = element('input', 'jp-mod-styled');
    box.type = 'checkbox';
    box.checked = checked;
    const wrapper = element('label', `jp-DaskObserve-logs-${label}`);
    wrapper.append(box, ` ${label}`);
    return box;
  }

  /**
   * A choice of one value or all (the empty value).
   */
  export function select(name: string, values: string[]): HTMLSelectElement {
    const choice = element(
      'select',
      `jp-DaskObserve-select jp-DaskObserve-logs-${name}`
    );
    choice.title = `Show the lines of one ${name}`;
    choice.append(new Option(`all ${name}s`, ''));
    for (const value of values) {
      choice.append(new Option(value, value));
    }
    return choice;
  }
}
