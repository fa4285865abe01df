import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

import { MainAreaWidget } from '@jupyterlab/apputils';
import { find } from '@lumino/algorithm';

import { ObservePanel } from './panel';
import { dashboardTab, reportTab } from './tabs';

/**
 * Command ids live under the `dask-observe:` prefix.
 */
export namespace CommandIDs {
  export const openPanel = 'dask-observe:open-panel';
  export const openReport = 'dask-observe:open-report';
  export const openDashboard = 'dask-observe:open-dashboard';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'dask-observe:plugin',
  description: 'A side panel that shows what dask-observe recorded.',
  autoStart: true,
  optional: [ILayoutRestorer],
  activate: (app: JupyterFrontEnd, restorer: ILayoutRestorer | null) => {
    const { commands, shell } = app;
    // A tab already open for the same page is brought forward, not doubled.
    const show = (widget: MainAreaWidget): void => {
      const open = find(shell.widgets('main'), w => w.id === widget.id);
      if (open) {
        widget.dispose();
        shell.activateById(open.id);
        return;
      }
      shell.add(widget, 'main');
      shell.activateById(widget.id);
    };

    commands.addCommand(CommandIDs.openReport, {
      label: args => `Open the report of run ${args.run}`,
      execute: args => show(reportTab(Number(args.run)))
    });
    commands.addCommand(CommandIDs.openDashboard, {
      label: args => `Open the Dask dashboard: ${args.page ?? 'status'}`,
      execute: args =>
        show(dashboardTab(String(args.cluster), String(args.page ?? 'status')))
    });

    const panel = new ObservePanel({
      openReport: run => void commands.execute(CommandIDs.openReport, { run }),
      openDashboard: (cluster, page) =>
        void commands.execute(CommandIDs.openDashboard, { cluster, page })
    });
    shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, panel.id);

    commands.addCommand(CommandIDs.openPanel, {
      label: 'Open the Dask Observe panel',
      execute: () => shell.activateById(panel.id)
    });
  }
};

export default plugin;
