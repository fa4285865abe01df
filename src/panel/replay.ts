import { Widget } from '@lumino/widgets';

import { button, element } from '../ui/dom';

/**
 * The bar over the panel's views while they replay a run: which run, and a
 * button back to live.
 */
export class ReplayBar extends Widget {
  /**
   * `onLive`: what "Back to live" does.
   */
  constructor(onLive: () => void) {
    super();
    this._onLive = onLive;
    this.addClass('jp-DaskObserve-replay');
    this.hide();
  }

  /**
   * Show the bar for the replayed run, or hide it (null: live).
   */
  showRun(runId: number | null): void {
    if (runId === null) {
      this.hide();
      return;
    }
    this.node.replaceChildren(
      element('span', '', `Showing run ${runId}`),
      button('jp-DaskObserve-replay-live', 'Back to live', () => this._onLive())
    );
    this.node.dataset.runId = String(runId);
    this.show();
  }

  private _onLive: () => void;
}
