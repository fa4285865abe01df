jest.mock('../data/api', () => ({}));
jest.mock('../data/stream', () => ({}));

import type { IRun } from '../data/api';
import { RunsModel } from '../sections/runs/model';
import { RunsView } from '../sections/runs/view';
import { run } from './fixtures';

/** A runs view over a model that is told its runs (no server). */
function view(runs: IRun[]): {
  view: RunsView;
  told: (runs: IRun[]) => Promise<void>;
  opened: number[];
} {
  let answer = runs;
  // As the server answers: the newest `limit` runs, and how many there are.
  const model = new RunsModel({
    fetchPage: async limit => ({
      runs: answer.slice(0, limit),
      total: answer.length
    }),
    active: false
  });
  const opened: number[] = [];
  const shown = new RunsView({
    model,
    openReport: id => opened.push(id),
    replay: () => undefined,
    showHistory: () => undefined
  });
  const told = async (next: IRun[]): Promise<void> => {
    answer = next;
    await model.refresh();
  };
  return { view: shown, told, opened };
}

function card(view: RunsView, id: number): HTMLElement {
  return view.node.querySelector<HTMLElement>(`[data-run-id="${id}"]`)!;
}

describe('RunsView', () => {
  it('says a finished run that lost workers or tasks finished with losses', async () => {
    const { view: shown, told } = view([]);
    await told([run(1), { ...run(2), n_lost: 1 }, { ...run(3), n_failed: 2 }]);
    const clean = card(shown, 1);
    expect(clean.classList).toContain('jp-DaskObserve-run-finished');
    expect(clean.querySelector('.jp-DaskObserve-run-status')!.textContent).toBe(
      'finished'
    );
    for (const [id, lost] of [
      [2, '1 worker died'],
      [3, '2 tasks failed']
    ] as const) {
      const lossy = card(shown, id);
      expect(lossy.classList).toContain('jp-DaskObserve-run-lossy');
      expect(lossy.classList).not.toContain('jp-DaskObserve-run-finished');
      const head = lossy.querySelector<HTMLElement>(
        '.jp-DaskObserve-run-head'
      )!;
      expect(
        head.querySelector('.jp-DaskObserve-run-status')!.textContent
      ).toBe('finished with losses');
      expect(head.title).toBe(lost);
    }
  });

  it('counts a stopped run\'s task that still ran, not "0 tasks"', async () => {
    const { view: shown, told } = view([]);
    const hang = { ...run(1), status: 'failed' as const, n_running: 1 };
    await told([hang, { ...run(2), n_tasks: 3 }]);
    const tasks = (id: number): string | null =>
      card(shown, id).querySelector('.jp-DaskObserve-run-tasks')!.textContent;
    expect(tasks(1)).toBe('1 task, 1 still running at its end');
    expect(tasks(2)).toBe('3 tasks');
  });

  it("keeps a run's buttons when the run's card changes under the pointer", async () => {
    const { view: shown, told, opened } = view([]);
    const running = { ...run(1), status: 'running' as const, ended: null };
    await told([running]);
    const logs = card(shown, 1).querySelector('.jp-DaskObserve-run-replay');
    // The run ends: a wall time and a Report button come, the status changes.
    await told([run(1)]);
    const ended = card(shown, 1);
    expect(ended.querySelector('.jp-DaskObserve-run-replay')).toBe(logs);
    expect(ended.classList).toContain('jp-DaskObserve-run-finished');
    expect(ended.querySelector('.jp-DaskObserve-run-status')!.textContent).toBe(
      'finished'
    );
    const report = ended.querySelector<HTMLButtonElement>(
      '.jp-DaskObserve-run-report'
    )!;
    // Its figures are written a moment later (a redraw while the user clicks).
    await told([{ ...run(1), n_tasks: 8, n_flags: 1 }]);
    expect(card(shown, 1)).toBe(ended);
    expect(ended.querySelector('.jp-DaskObserve-run-report')).toBe(report);
    expect(ended.querySelector('.jp-DaskObserve-run-tasks')!.textContent).toBe(
      '8 tasks'
    );
    report.click();
    expect(opened).toEqual([1]);
  });

  it('puts a new run on top without touching the others, and drops deleted ones', async () => {
    const { view: shown, told } = view([]);
    await told([run(2), run(1)]);
    const [two, one] = [card(shown, 2), card(shown, 1)];
    const box = two.querySelector<HTMLInputElement>('input[type="checkbox"]')!;
    box.checked = true;
    box.dispatchEvent(new Event('change'));
    await told([run(3), run(2), run(1)]);
    const ids = Array.from(
      shown.node.querySelectorAll<HTMLElement>('[data-run-id]')
    ).map(node => node.dataset.runId);
    expect(ids).toEqual(['3', '2', '1']);
    expect([card(shown, 2), card(shown, 1)]).toEqual([two, one]);
    expect(box.checked).toBe(true); // ticked, as the user left it
    await told([run(3), run(1)]);
    expect(shown.node.querySelector('[data-run-id="2"]')).toBeNull();
    expect(card(shown, 1)).toBe(one);
    expect(
      shown.node.querySelector('.jp-DaskObserve-runs-status')!.textContent
    ).toBe('2 runs');
  });
});

describe('RunsView, a year of runs', () => {
  it('draws the newest page of cards, and more on demand', async () => {
    const { view: shown, told } = view([]);
    const runs = Array.from({ length: 60 }, (_, i) => run(60 - i));
    await told(runs);
    const status = shown.node.querySelector('.jp-DaskObserve-runs-status')!;
    const more = shown.node.querySelector<HTMLButtonElement>(
      '.jp-DaskObserve-runs-more'
    )!;
    const cards = (): number =>
      shown.node.querySelectorAll('.jp-DaskObserve-run').length;
    expect(cards()).toBe(25);
    expect(status.textContent).toBe('60 runs, the newest 25 shown');
    expect(more.hidden).toBe(false);
    expect(more.textContent).toBe('Show 25 more of 35');
    more.click(); // fetched: the server answers the cards shown
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(cards()).toBe(50);
    expect(more.textContent).toBe('Show 10 more of 10');
    more.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(cards()).toBe(60);
    expect(more.hidden).toBe(true);
    expect(status.textContent).toBe('60 runs');
  });

  it('offers no comparison below two runs', async () => {
    const { view: shown, told } = view([]);
    await told([run(1)]);
    const compare = shown.node.querySelector<HTMLButtonElement>(
      '.jp-DaskObserve-runs-compare'
    )!;
    expect(compare.hidden).toBe(true);
    await told([run(2), run(1)]);
    expect(compare.hidden).toBe(false);
  });
});
