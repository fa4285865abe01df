import { element } from './dom';
import { formatSeconds, fromEpoch } from './format';

/**
 * What a run card shows of a run, whether of this machine's store (`IRun`)
 * or of the team's archive (`IArchiveRun`).
 */
export interface ICardRun {
  name: string;
  status: string;
  n_tasks: number;
  n_failed: number;
  duration_s: number | null;
  started: number;
}

/**
 * A run card (`li`), its status as a class; `id` its `data-run-id`.
 */
export function runCard(run: ICardRun, id: string | number): HTMLLIElement {
  const item = element(
    'li',
    `jp-DaskObserve-run jp-DaskObserve-run-${run.status}`
  );
  item.dataset.runId = String(id);
  return item;
}

/**
 * A card's first line: the box that picks it for a comparison, its name
 * and status (text only: names are users' text).
 */
export function cardHead(run: ICardRun, box: HTMLInputElement): HTMLDivElement {
  const head = element('div', 'jp-DaskObserve-run-head');
  head.append(
    box,
    element('span', 'jp-DaskObserve-run-name', run.name),
    element('span', 'jp-DaskObserve-run-status', run.status)
  );
  return head;
}

/**
 * A card's second line: tasks (and failed ones), wall time, when it started;
 * the views add their own after.
 */
export function cardMeta(run: ICardRun): HTMLDivElement {
  const tasks =
    `${run.n_tasks} task${run.n_tasks === 1 ? '' : 's'}` +
    (run.n_failed > 0 ? `, ${run.n_failed} failed` : '');
  const meta = element('div', 'jp-DaskObserve-run-meta');
  meta.append(element('span', 'jp-DaskObserve-run-tasks', tasks));
  if (run.duration_s !== null) {
    meta.append(
      element('span', 'jp-DaskObserve-run-time', formatSeconds(run.duration_s))
    );
  }
  meta.append(
    element(
      'span',
      'jp-DaskObserve-run-started',
      fromEpoch(run.started).toLocaleString()
    )
  );
  return meta;
}
