import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

import { ObservePanel } from './panel';

/**
 * Command ids live under the `dask-observe:` prefix.
 */
export namespace CommandIDs {
  export const openPanel = 'dask-observe:open-panel';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'dask-observe:plugin',
  description: 'A side panel that shows what dask-observe recorded.',
  autoStart: true,
  optional: [ILayoutRestorer],
  activate: (app: JupyterFrontEnd, restorer: ILayoutRestorer | null) => {
    const panel = new ObservePanel();
    app.shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, panel.id);

    app.commands.addCommand(CommandIDs.openPanel, {
      label: 'Open the Dask Observe panel',
      execute: () => app.shell.activateById(panel.id)
    });
  }
};

export default plugin;
