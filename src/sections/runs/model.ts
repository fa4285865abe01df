import type { IRun, IRunsPage } from '../../data/api';
import { fetchRuns } from '../../data/api';
import type { PolledList } from '../../data/polledlist';
import { PagedList } from '../../data/polledlist';

/**
 * The runs in the store, newest first.
 */
export class RunsModel extends PagedList<IRun> {
  constructor(options: RunsModel.IOptions = {}) {
    const fetchPage = options.fetchPage ?? fetchRuns;
    super({
      fetch: async () => {
        const page = await fetchPage(this._limit);
        this._total = page.total;
        return page.runs;
      },
      // A run pruned beyond the page changes the count alone.
      signature: runs => JSON.stringify([this._total, runs]),
      name: 'dask-observe:runs',
      ...options
    });
  }
}

/**
 * The namespace for `RunsModel` statics.
 */
export namespace RunsModel {
  export interface IOptions extends Partial<PolledList.IOptions<IRun>> {
    /**
     * Fetches the newest runs (the server's, by default).
     */
    fetchPage?: (limit: number) => Promise<IRunsPage>;
  }
}
