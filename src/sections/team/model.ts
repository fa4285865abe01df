import type { IArchivePage, IArchiveRun } from '../../data/api';
import { fetchArchive } from '../../data/api';
import type { PolledList } from '../../data/polledlist';
import { PagedList } from '../../data/polledlist';

/**
 * The runs of the team's archive, newest first: listed from object storage,
 * so polled less often than the local runs.
 */
export class TeamModel extends PagedList<IArchiveRun> {
  constructor(options: TeamModel.IOptions = {}) {
    const fetchPage = options.fetchPage ?? fetchArchive;
    super({
      fetch: async () => {
        const page = await fetchPage(this._limit);
        this.archive = page.archive;
        this.skipped = page.skipped ?? 0;
        this._total = page.total ?? page.runs.length;
        return page.runs;
      },
      // A run pruned beyond the page changes the count alone.
      signature: runs => JSON.stringify([this._total, this.skipped, runs]),
      name: 'dask-observe:team',
      interval: 30 * 1000,
      ...options
    });
  }

  /**
   * Where the archive is; null where none is set (or not fetched yet).
   */
  archive: string | null = null;

  /**
   * Entries of the archive its last listing skipped as not valid runs.
   */
  skipped = 0;
}

/**
 * The namespace for `TeamModel` statics.
 */
export namespace TeamModel {
  export interface IOptions extends Partial<PolledList.IOptions<IArchiveRun>> {
    /**
     * Fetches the archive's newest runs (the server's, by default).
     */
    fetchPage?: (limit: number) => Promise<IArchivePage>;
  }
}
