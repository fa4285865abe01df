jest.mock('../data/api', () => ({}));
jest.mock('../data/stream', () => ({}));
jest.mock('../panel/tabs', () => ({ DASHBOARD_PAGES: ['status'] }));

import type { ICluster } from '../data/api';
import { ClustersView } from '../sections/clusters/view';
import { ClusterModel } from '../sections/clusters/model';
import { cluster } from './fixtures';

/** A clusters view over a model that is told its clusters (no server). */
function view(): {
  view: ClustersView;
  told: (clusters: ICluster[]) => Promise<void>;
} {
  let answer: ICluster[] = [];
  const model = new ClusterModel({ fetch: async () => answer, active: false });
  const shown = new ClustersView({ model, openPage: () => undefined });
  const told = async (next: ICluster[]): Promise<void> => {
    answer = next;
    await model.refresh();
  };
  return { view: shown, told };
}

function seen(view: ClustersView): HTMLElement {
  return view.node.querySelector<HTMLElement>('.jp-DaskObserve-cluster-seen')!;
}

describe('ClustersView', () => {
  it('says when a live scheduler stopped answering, and when it answers again', async () => {
    const { view: shown, told } = view();
    const frozen = 1_700_000_000;
    await told([cluster('a', true)]);
    expect(seen(shown).textContent).toBe('live');

    await told([{ ...cluster('a', true), silent_since: frozen }]);
    const card = shown.node.querySelector('.jp-DaskObserve-cluster')!;
    expect(card.classList).toContain('jp-mod-silent');
    const since = new Date(frozen * 1000).toLocaleTimeString();
    expect(seen(shown).textContent).toBe(`not answering since ${since}`);
    expect(seen(shown).title).toContain('has not answered');

    await told([cluster('a', true)]);
    expect(seen(shown).textContent).toBe('live');
    const again = shown.node.querySelector('.jp-DaskObserve-cluster')!;
    expect(again.classList).not.toContain('jp-mod-silent');
  });

  it('shows a cluster no recorder watches any more as gone, silent or not', async () => {
    const { view: shown, told } = view();
    await told([{ ...cluster('a', false), silent_since: 1, last_seen: 2 }]);
    const card = shown.node.querySelector('.jp-DaskObserve-cluster')!;
    expect(card.classList).toContain('jp-mod-gone');
    expect(card.classList).not.toContain('jp-mod-silent');
    expect(seen(shown).textContent).toMatch(/^last seen /);
  });
});

describe('ClustersView, with no cluster', () => {
  it('says how to make one once the store answered, and nothing over a list', async () => {
    const { view: shown, told } = view();
    const status = shown.node.querySelector<HTMLElement>(
      '.jp-DaskObserve-clusters-status'
    )!;
    expect(status.textContent).toBe('Looking for clusters…');
    await told([]);
    expect(status.textContent).toContain('%load_ext dask_observe');
    expect(status.textContent).toContain('client = Client()');
    expect(status.hidden).toBe(false);
    await told([cluster('a', true)]);
    expect(status.hidden).toBe(true);
  });
});

describe('ClustersView, by notebook', () => {
  it('names the notebooks whose clients watch a cluster, whole on hover', async () => {
    const { view: shown, told } = view();
    const notebooks = ['work/etl.ipynb', 'analysis.ipynb'];
    await told([{ ...cluster('a', true), notebooks }]);
    const by = shown.node.querySelector<HTMLElement>(
      '.jp-DaskObserve-cluster-by'
    )!;
    expect(by.textContent).toBe('in etl.ipynb, analysis.ipynb');
    expect(by.title).toBe('work/etl.ipynb\nanalysis.ipynb');
    await told([{ ...cluster('a', false), notebooks }]);
    expect(
      shown.node.querySelector('.jp-DaskObserve-cluster-by')!.textContent
    ).toBe('was in etl.ipynb, analysis.ipynb');
  });
});
