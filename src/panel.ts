import { PanelLayout, Widget } from '@lumino/widgets';

import { observeIcon } from './icon';
import { RunsView } from './runs';

/**
 * The DOM id of the side panel; acceptance checks and users' CSS rely on it.
 */
export const PANEL_ID = 'dask-observe-panel';

/**
 * The Dask Observe side panel: one widget holding the views of the store.
 */
export class ObservePanel extends Widget {
  constructor() {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DaskObserve-panel');
    this.title.icon = observeIcon;
    this.title.caption = 'Dask Observe';
    const layout = (this.layout = new PanelLayout());
    this.runs = new RunsView();
    layout.addWidget(this.runs);
  }

  /**
   * The list of recorded runs.
   */
  readonly runs: RunsView;
}
