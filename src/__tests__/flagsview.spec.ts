jest.mock('../data/api', () => ({}));
jest.mock('../data/stream', () => ({}));

import { Signal } from '@lumino/signaling';

import type { IFlag } from '../data/api';
import type { FlagsModel } from '../sections/flags/model';
import { FlagsView } from '../sections/flags/view';

/** A flags model the test tells its flags (no server, no socket). */
class Flags {
  changed = new Signal<this, void>(this);
  runId: number | null = 1;
  flags: IFlag[] = [];
  stream = {
    stateChanged: new Signal(this),
    failed: new Signal(this),
    gaps: new Signal(this),
    reset: new Signal(this)
  };

  send(flags: IFlag[]): void {
    this.flags = flags;
    this.changed.emit();
  }
}

function flag(kind: string, time: number, evidence: string[]): IFlag {
  return {
    time,
    kind,
    severity: 'warning',
    worker: null,
    message: `${kind} happened`,
    advice: 'do less',
    evidence: evidence.map((text, i) => ({
      time: time + i,
      worker: null,
      text
    }))
  };
}

function evidenceOf(view: FlagsView, kind: string): HTMLElement {
  return view.node.querySelector<HTMLElement>(
    `[data-kind="${kind}"] .jp-DaskObserve-flag-evidence`
  )!;
}

describe('FlagsView', () => {
  it('keeps the evidence a user opened when the flags are sent again', () => {
    const model = new Flags();
    const view = new FlagsView(model as unknown as FlagsModel);
    model.send([flag('spilling', 10, ['spilled 1 GiB'])]);
    const card = view.node.querySelector<HTMLElement>(
      '[data-kind="spilling"]'
    )!;
    expect(evidenceOf(view, 'spilling').hidden).toBe(true);
    card.click();
    expect(evidenceOf(view, 'spilling').hidden).toBe(false);

    // The server judges the running run again: more evidence, a new flag.
    model.send([
      flag('spilling', 10, ['spilled 1 GiB', 'spilled 2 GiB']),
      flag('gil-contention', 20, ['waited 60%'])
    ]);
    const kinds = Array.from(
      view.node.querySelectorAll<HTMLElement>('.jp-DaskObserve-flag')
    ).map(node => node.dataset.kind);
    expect(kinds).toEqual(['gil-contention', 'spilling']); // newest first
    const opened = evidenceOf(view, 'spilling');
    expect(opened.hidden).toBe(false);
    expect(opened.textContent).toContain('spilled 2 GiB');
    expect(evidenceOf(view, 'gil-contention').hidden).toBe(true);
    expect(view.node.querySelector('[data-kind="spilling"]')).toBe(card);

    // The same card's click closes it, and it stays closed when sent again.
    card.click();
    model.send([...model.flags]);
    expect(evidenceOf(view, 'spilling').hidden).toBe(true);
    view.dispose();
  });
});
