import { element } from './dom';
import { dateTime, formatSeconds } from './format';

/**
 * What a run card shows of a run, whether of this machine's store (`IRun`)
 * or of the team's archive (`IArchiveRun`).
 */
export interface ICardRun {
  name: string;
  status: string;
  n_tasks: number;
  n_failed: number;
  /** Workers it lost (absent from an older server: none known). */
  n_lost?: number;
  /** Its tasks still running as it ended (absent from an older server). */
  n_running?: number;
  duration_s: number | null;
  started: number;
}

/**
 * What a run came to, as every surface says it (`store/outcome.py`):
 * its status, or "finished with losses" for a finished run that lost tasks
 * or workers (a worker killed for memory is no green "finished").
 */
export function outcome(run: ICardRun): string {
  const lost = run.n_failed > 0 || (run.n_lost ?? 0) > 0;
  return run.status === 'finished' && lost
    ? 'finished with losses'
    : run.status;
}

/**
 * What a run lost, said: "1 task failed, 2 workers died" ('' for none).
 */
export function losses(run: ICardRun): string {
  const parts: string[] = [];
  if (run.n_failed > 0) {
    parts.push(`${run.n_failed} task${run.n_failed === 1 ? '' : 's'} failed`);
  }
  const lost = run.n_lost ?? 0;
  if (lost > 0) {
    parts.push(`${lost} worker${lost === 1 ? '' : 's'} died`);
  }
  return parts.join(', ');
}

/**
 * A run card (`li`), its outcome as a class (`-lossy` for a finished run
 * that lost tasks or workers); `id` its `data-run-id`.
 */
export function runCard(run: ICardRun, id: string | number): HTMLLIElement {
  const kind = outcome(run) === 'finished with losses' ? 'lossy' : run.status;
  const item = element('li', `jp-DaskObserve-run jp-DaskObserve-run-${kind}`);
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
    element('span', 'jp-DaskObserve-run-status', outcome(run))
  );
  const lost = losses(run);
  if (lost !== '') {
    head.title = lost;
  }
  return head;
}

/**
 * A card's second line: tasks (and failed ones), wall time, when it started;
 * the views add their own after.
 */
export function cardMeta(run: ICardRun): HTMLDivElement {
  const running = run.n_running ?? 0;
  const tasks =
    `${run.n_tasks} task${run.n_tasks === 1 ? '' : 's'}` +
    (run.n_failed > 0 ? `, ${run.n_failed} failed` : '') +
    (running > 0 ? `, ${running} still running at its end` : '');
  const meta = element('div', 'jp-DaskObserve-run-meta');
  meta.append(element('span', 'jp-DaskObserve-run-tasks', tasks));
  if (run.duration_s !== null) {
    meta.append(
      element('span', 'jp-DaskObserve-run-time', formatSeconds(run.duration_s))
    );
  }
  meta.append(
    element('span', 'jp-DaskObserve-run-started', dateTime(run.started))
  );
  return meta;
}
