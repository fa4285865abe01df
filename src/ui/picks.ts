/**
 * Two runs picked from a list of cards for a comparison: ticking a third
 * lets go of the one picked first (its box unticked). The runs view and the
 * team view share it; keys are run ids (numbers here, the archive's text
 * there), each card's `data-run-id`.
 */
export class TwoPicks<K extends string | number> {
  /**
   * @param list - the element holding the cards (`[data-run-id]`).
   * @param changed - told after each change (to redraw the compare button).
   */
  constructor(list: HTMLElement, changed: () => void) {
    this._list = list;
    this._changed = changed;
  }

  /**
   * The keys picked, the first picked first.
   */
  get picked(): ReadonlySet<K> {
    return this._picked;
  }

  /**
   * The two picked, or null unless two are.
   */
  get pair(): [K, K] | null {
    const [a, b] = this._picked;
    return this._picked.size === 2 ? [a, b] : null;
  }

  /**
   * The box that picks the card of `key`, ticked if it is picked.
   */
  box(key: K): HTMLInputElement {
    const box = document.createElement('input');
    box.className = 'jp-DaskObserve-run-pick';
    box.type = 'checkbox';
    box.title = 'Pick for a comparison';
    box.checked = this._picked.has(key);
    box.addEventListener('change', () => this.set(key, box.checked));
    return box;
  }

  /**
   * Tick (`on`) or untick the card of `key`.
   */
  set(key: K, on: boolean): void {
    if (on) {
      this._picked.add(key);
      if (this._picked.size > 2) {
        const [first] = this._picked;
        this._picked.delete(first);
        const card = Array.from(
          this._list.querySelectorAll<HTMLElement>('[data-run-id]')
        ).find(node => node.dataset.runId === String(first));
        const box = card?.querySelector<HTMLInputElement>(
          'input[type="checkbox"]'
        );
        if (box) {
          box.checked = false;
        }
      }
    } else {
      this._picked.delete(key);
    }
    this._changed();
  }

  /**
   * Forget the picks that are no longer listed (deleted, pruned).
   */
  keepOnly(listed: ReadonlySet<K>): void {
    for (const key of Array.from(this._picked)) {
      if (!listed.has(key)) {
        this._picked.delete(key);
      }
    }
    this._changed();
  }

  private _changed: () => void;
  private _list: HTMLElement;
  private _picked = new Set<K>();
}
