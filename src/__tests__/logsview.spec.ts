import { LogsView } from '../sections/logs/view';
import { StoreStream } from '../data/stream';
import { FakeSocket } from './fakesocket';
import type { Toolbar, ToolbarButton } from './uicomponents';

jest.mock('@jupyterlab/services', () =>
  jest.requireActual<typeof import('./fixtures')>('./fixtures').services()
);
jest.mock('@jupyterlab/coreutils', () => ({
  URLExt: { join: (...parts: string[]) => parts.join('/') }
}));
jest.mock('../data/api', () => ({ requestAPI: jest.fn() }));

/** After the view's next drawing frame. */
async function drawn(): Promise<void> {
  await new Promise(resolve => requestAnimationFrame(() => resolve(null)));
}

function text(view: LogsView, selector: string): string {
  const node = view.node.querySelector<HTMLElement>(selector)!;
  return node.hidden ? '' : (node.textContent ?? '');
}

describe('LogsView, before and between lines', () => {
  it('says what an empty list means, never the socket’s state', async () => {
    FakeSocket.made = [];
    const stream = new StoreStream();
    const view = new LogsView({ stream });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-empty')).toMatch(/^No logs yet: /);
    expect(text(view, '.jp-DaskObserve-logs-state')).toBe('');

    stream.follow({ cluster: 'abc' });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-state')).toBe('(connecting…)');
    expect(text(view, '.jp-DaskObserve-logs-empty')).toBe('No lines yet.');

    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'subscribed', after: 0 });
    const line = {
      seq: 1,
      time: 1,
      level: 'INFO',
      source: 'worker',
      worker: 'tcp://127.0.0.1:1',
      logger: 'distributed.worker',
      message: 'started',
      task: null,
      fields: null
    };
    socket.say({ type: 'batch', last: 1, logs: [line] });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-state')).toBe('');
    expect(text(view, '.jp-DaskObserve-logs-empty')).toBe('');

    const filter = view.node.querySelector<HTMLInputElement>(
      '.jp-DaskObserve-logs-filter'
    )!;
    filter.value = 'nowhere in any line';
    filter.dispatchEvent(new Event('input'));
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-empty')).toBe(
      'No line passes the filters.'
    );
    view.dispose();
    stream.dispose();
  });
});

describe('LogsView, a run from near its end', () => {
  it('says it shows the run’s last lines, and where the rest are', async () => {
    FakeSocket.made = [];
    const stream = new StoreStream();
    const view = new LogsView({ stream, openInTab: () => undefined });
    stream.follow({ run: 7 }, -5000);
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'subscribed', after: 95_000, tail: true });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-tail')).toBe(
      'The run’s last lines: open in a tab for all of them.'
    );
    stream.follow({ run: 8 }, -5000); // a short run: nothing left out
    const again = FakeSocket.made[FakeSocket.made.length - 1];
    again.open();
    again.say({ type: 'subscribed', after: 0, tail: false });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-tail')).toBe('');
    view.dispose();
    stream.dispose();
  });

  it('says an empty list from near the end is only the end’s', async () => {
    FakeSocket.made = [];
    const stream = new StoreStream();
    const view = new LogsView({ stream, openInTab: () => undefined });
    stream.follow({ run: 7 }, -5000);
    FakeSocket.made[0].open();
    FakeSocket.made[0].say({ type: 'subscribed', after: 95_000, tail: true });
    await drawn();
    expect(text(view, '.jp-DaskObserve-logs-empty')).toBe(
      'No lines near the run’s end.'
    );
    stream.follow({ cluster: 'c1' }, -20_000);
    const live = FakeSocket.made[FakeSocket.made.length - 1];
    live.open();
    live.say({ type: 'subscribed', after: 95_000, tail: true });
    await drawn();
    // A cluster's tab starts near its end too: no tab is offered for more.
    expect(text(view, '.jp-DaskObserve-logs-tail')).toBe(
      'The cluster’s newest lines.'
    );
    expect(text(view, '.jp-DaskObserve-logs-empty')).toBe('No recent lines.');
    view.dispose();
    stream.dispose();
  });
});

describe('LogsView, its section title’s action', () => {
  it('offers the logs wide in a tab, as an icon button with its words', () => {
    // (The real ToolbarButton is drawn and clicked in the browser tests:
    // jest sees a stand-in, src/__tests__/uicomponents.ts.)
    const stream = new StoreStream();
    const opened: number[] = [];
    const view = new LogsView({ stream, openInTab: () => opened.push(1) });
    expect([...view.toolbar.names()]).toEqual(['open-in-tab']);
    const open = (view.toolbar as unknown as Toolbar).item('open-in-tab') as
      ToolbarButton | undefined;
    expect(open?.props.className).toBe('jp-DaskObserve-logs-open');
    expect(open?.props.tooltip).toMatch(/^Open in a tab: /);
    (open?.props.onClick as () => void)();
    expect(opened).toEqual([1]);
    // The tab's own view has no action to open itself again.
    const tab = new LogsView({ stream });
    expect([...tab.toolbar.names()]).toEqual([]);
    view.dispose();
    tab.dispose();
    stream.dispose();
  });
});

describe('LogsView, a replay in many batches', () => {
  it('draws at once, holds back while more follow, draws the last at once', async () => {
    FakeSocket.made = [];
    const stream = new StoreStream();
    const view = new LogsView({ stream });
    stream.follow({ run: 9 });
    const socket = FakeSocket.made[0];
    socket.open();
    socket.say({ type: 'subscribed', after: 0 });
    const line = (seq: number) => ({
      seq,
      time: seq,
      level: 'INFO',
      source: 'worker',
      worker: 'tcp://127.0.0.1:1',
      logger: 'distributed.worker',
      message: `line ${seq}`,
      task: null,
      fields: null
    });
    const count = () => text(view, '.jp-DaskObserve-logs-count');
    // The first batch after a quiet spell is drawn at the next frame...
    socket.say({ type: 'batch', last: 1, logs: [line(1)], more: true });
    await drawn();
    expect(count()).toBe('1 of 1 lines');
    // ...the next ones, while the server says more follow at once, wait
    // (each frame drawn was a layout and a paint)...
    socket.say({ type: 'batch', last: 2, logs: [line(2)], more: true });
    await drawn();
    expect(count()).toBe('1 of 1 lines');
    // ...and the last is drawn at the next frame, with all before it.
    socket.say({ type: 'batch', last: 3, logs: [line(3)] });
    await drawn();
    expect(count()).toBe('3 of 3 lines');
    view.dispose();
    stream.dispose();
  });
});
