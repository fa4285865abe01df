import { TwoPicks } from '../ui/picks';

/** A list of cards with a box each, as the runs and team views draw them. */
function cards(ids: string[]): HTMLUListElement {
  const list = document.createElement('ul');
  for (const id of ids) {
    const card = document.createElement('li');
    card.dataset.runId = id;
    const box = document.createElement('input');
    box.type = 'checkbox';
    card.append(box);
    list.append(card);
  }
  return list;
}

function tick(list: HTMLElement, id: string): void {
  const box = list.querySelector<HTMLInputElement>(
    `[data-run-id="${id}"] input`
  );
  box!.checked = true;
}

describe('TwoPicks', () => {
  it('keeps the two picked last, unticking the first of three', () => {
    const list = cards(['a', 'b', 'c']);
    const changes = jest.fn();
    const picks = new TwoPicks<string>(list, changes);
    for (const id of ['a', 'b', 'c']) {
      tick(list, id);
      picks.set(id, true);
    }
    expect([...picks.picked]).toEqual(['b', 'c']);
    expect(picks.pair).toEqual(['b', 'c']);
    const boxes = Array.from(list.querySelectorAll('input')).map(
      b => b.checked
    );
    expect(boxes).toEqual([false, true, true]);
    expect(changes).toHaveBeenCalledTimes(3);
  });

  it('has no pair with one pick, and forgets runs no longer listed', () => {
    const list = cards(['1', '2']);
    const picks = new TwoPicks<number>(list, () => undefined);
    picks.set(1, true);
    picks.set(2, true);
    picks.set(1, false);
    expect(picks.pair).toBeNull();
    picks.set(1, true);
    picks.keepOnly(new Set([1]));
    expect([...picks.picked]).toEqual([1]);
  });

  it("makes each card's box, ticked when picked, picking when ticked", () => {
    const list = document.createElement('ul');
    const picks = new TwoPicks<string>(list, () => undefined);
    picks.set('a', true);
    expect(picks.box('a').checked).toBe(true);
    const box = picks.box('b');
    expect(box.checked).toBe(false);
    box.checked = true;
    box.dispatchEvent(new Event('change'));
    expect(picks.pair).toEqual(['a', 'b']);
  });
});
