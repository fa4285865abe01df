import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ILayoutRestorer } from '@jupyterlab/application';

import type { MainAreaWidget } from '@jupyterlab/apputils';
import { ICommandPalette, WidgetTracker } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { find } from '@lumino/algorithm';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import type { IPanelSettings } from './panel/panel';
import { ObservePanel } from './panel/panel';
import type { ITarget } from './data/stream';
import {
  LogsTab,
  archiveComparisonTab,
  archiveReportTab,
  comparisonTab,
  dashboardTab,
  noticeWhenGone,
  reportTab
} from './panel/tabs';
import { CommandIDs, IDaskObserve } from './tokens';

export { CommandIDs, IDaskObserve, IGoneWorkers } from './tokens';

/**
 * The plugin's id, which is also the name of its settings schema.
 */
const PLUGIN_ID = 'dask-observe:plugin';

/**
 * Where the panel's folded sections are kept between sessions (IStateDB).
 */
const STATE_ID = 'dask-observe:panel';

const plugin: JupyterFrontEndPlugin<IDaskObserve> = {
  id: PLUGIN_ID,
  description: 'A side panel that shows what dask-observe recorded.',
  autoStart: true,
  provides: IDaskObserve,
  optional: [ILayoutRestorer, ISettingRegistry, IStateDB, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    registry: ISettingRegistry | null,
    state: IStateDB | null,
    palette: ICommandPalette | null
  ): IDaskObserve => {
    const { commands, shell } = app;
    // The main-area tabs (reports, comparisons, dashboards, logs), each with
    // the command and arguments that opened it: the layout restorer opens
    // them again after a reload.
    const tracker = new WidgetTracker<MainAreaWidget>({
      namespace: 'dask-observe'
    });
    const openedBy = new WeakMap<MainAreaWidget, ReadonlyPartialJSONObject>();
    // A tab already open for the same page is brought forward, not doubled.
    const show = (
      widget: MainAreaWidget,
      command: string,
      args: ReadonlyPartialJSONObject
    ): void => {
      const open = find(shell.widgets('main'), w => w.id === widget.id);
      if (open) {
        widget.dispose();
        shell.activateById(open.id);
        return;
      }
      openedBy.set(widget, { command, args });
      shell.add(widget, 'main');
      void tracker.add(widget);
      shell.activateById(widget.id);
    };

    commands.addCommand(CommandIDs.openReport, {
      label: args => `Open the report of run ${args.run}`,
      execute: args =>
        show(reportTab(Number(args.run)), CommandIDs.openReport, args)
    });
    commands.addCommand(CommandIDs.openDashboard, {
      label: args => `Open the Dask dashboard: ${args.page ?? 'status'}`,
      execute: args => {
        const cluster = String(args.cluster);
        const tab = dashboardTab(cluster, String(args.page ?? 'status'));
        noticeWhenGone(tab, cluster, panel.models.clusters);
        show(tab, CommandIDs.openDashboard, args);
      }
    });

    commands.addCommand(CommandIDs.openComparison, {
      label: args => `Compare run ${args.b} with run ${args.a}`,
      execute: args =>
        show(
          comparisonTab(Number(args.a), Number(args.b)),
          CommandIDs.openComparison,
          args
        )
    });
    commands.addCommand(CommandIDs.openArchiveReport, {
      label: args => `Open the report of team run ${args.run}`,
      execute: args =>
        show(
          archiveReportTab(String(args.run)),
          CommandIDs.openArchiveReport,
          args
        )
    });
    commands.addCommand(CommandIDs.openArchiveComparison, {
      label: args => `Compare team run ${args.b} with ${args.a}`,
      execute: args =>
        show(
          archiveComparisonTab(String(args.a), String(args.b)),
          CommandIDs.openArchiveComparison,
          args
        )
    });
    commands.addCommand(CommandIDs.restoreTab, {
      label: 'Open a Dask Observe tab again',
      execute: args =>
        commands.execute(
          String(args.command),
          (args.args ?? {}) as ReadonlyPartialJSONObject
        )
    });

    const panel = new ObservePanel({
      openReport: run => void commands.execute(CommandIDs.openReport, { run }),
      openComparison: (a, b) =>
        void commands.execute(CommandIDs.openComparison, { a, b }),
      openArchiveReport: run =>
        void commands.execute(CommandIDs.openArchiveReport, { run }),
      openArchiveComparison: (a, b) =>
        void commands.execute(CommandIDs.openArchiveComparison, { a, b }),
      openDashboard: (cluster, page) =>
        void commands.execute(CommandIDs.openDashboard, { cluster, page }),
      openLogs: (target, label) =>
        void commands.execute(CommandIDs.openLogs, { ...target, label })
    });

    commands.addCommand(CommandIDs.openLogs, {
      label: args =>
        args.run !== undefined
          ? `Open the logs of run ${args.run} in a tab`
          : 'Open the live logs in a tab',
      execute: args => {
        const target: ITarget =
          args.run !== undefined
            ? { run: Number(args.run) }
            : { cluster: String(args.cluster) };
        const label = String(args.label ?? args.cluster ?? `run ${args.run}`);
        show(
          new LogsTab(panel.logsTabOptions(target, label)),
          CommandIDs.openLogs,
          args
        );
      }
    });
    shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, panel.id);
    void restorer?.restore(tracker, {
      command: CommandIDs.restoreTab,
      args: widget => openedBy.get(widget) ?? {},
      name: widget => widget.id
    });

    if (state) {
      // The sections the user folded stay folded in the next session.
      void state
        .fetch(STATE_ID)
        .then(saved => {
          const collapsed = (saved as { collapsed?: unknown } | undefined)
            ?.collapsed;
          if (Array.isArray(collapsed)) {
            panel.collapsed = collapsed.filter(c => typeof c === 'string');
          }
        })
        .catch(reason =>
          console.warn('dask-observe: folded sections not read', reason)
        )
        .finally(() =>
          panel.collapsedChanged.connect((_, titles) => {
            void state.save(STATE_ID, { collapsed: titles });
          })
        );
    }

    if (registry) {
      // Settings come after the panel is up; it follows their changes.
      void registry.load(PLUGIN_ID).then(
        settings => {
          const apply = () =>
            panel.configure(settings.composite as unknown as IPanelSettings);
          apply();
          settings.changed.connect(apply);
        },
        reason => console.warn('dask-observe: settings not loaded', reason)
      );
    }

    commands.addCommand(CommandIDs.openPanel, {
      label: 'Open the Dask Observe panel',
      execute: () => shell.activateById(panel.id)
    });
    commands.addCommand(CommandIDs.openLiveLogs, {
      label: 'Open the logs the panel follows in a tab',
      execute: () => panel.openLogsTab()
    });
    commands.addCommand(CommandIDs.openNewestReport, {
      label: 'Open the report of the newest run',
      isEnabled: () => panel.models.runs.items.length > 0,
      execute: () => {
        const newest = panel.models.runs.items[0];
        if (newest) {
          void commands.execute(CommandIDs.openReport, { run: newest.id });
        }
      }
    });
    commands.addCommand(CommandIDs.backToLive, {
      label: 'Follow the live cluster again (leave a replayed run)',
      execute: () => panel.live()
    });
    for (const command of [
      CommandIDs.openPanel,
      CommandIDs.openLiveLogs,
      CommandIDs.openNewestReport,
      CommandIDs.backToLive
    ]) {
      palette?.addItem({ command, category: 'Dask Observe' });
    }
    return panel;
  }
};

export default plugin;
