// NIP-50's GIN index takes new events' words into its pending list (fastupdate), cheap to append to,
// and merges the list into the index proper once it outgrows gin_pending_list_limit. Left to
// PostgreSQL, that merge is done by whichever insert passes the limit, inside its transaction: every
// few thousand events one write batch, and every OK waiting on it, stood still for a merge of
// hundreds of milliseconds. Here the merge runs on a connection of its own, soon after this process
// has written enough words, beside the writer instead of in its way (on the other core); the
// index's own limit (raised by migration 20270102000001) is then only the backstop for writers
// that do not merge (psql, another tool). Searches read the pending list as they go, so it is kept
// short: merged after every MERGE_EVERY_EVENTS searchable events (about PostgreSQL's default limit), or MERGE_AFTER_MS after the first.
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { Change } from './changes.js';
import { hasWords } from './prepared-event.js';

const MERGE_EVERY_EVENTS = 4000;
const MERGE_AFTER_MS = 1000;

export class SearchIndexMerger {
  private unmerged = 0;
  private timer: NodeJS.Timeout | undefined;
  private merging: Promise<void> | undefined;
  private again = false;
  private failing = false;
  private stopped = false;
  readonly stats = { merges: 0 };

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
  ) {}

  /** A change stream listener: counts what this process's writer stored with words to index. */
  observe(change: Change): void {
    if (change.type !== 'stored' || change.source !== 'local' || this.stopped) return;
    let searchable = 0;
    for (const p of change.events) if (hasWords(p)) searchable++;
    if (searchable === 0) return;
    this.unmerged += searchable;
    if (this.unmerged >= MERGE_EVERY_EVENTS) this.merge();
    else this.timer ??= setTimeout(() => this.merge(), MERGE_AFTER_MS).unref();
  }

  private merge(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.merging) {
      this.again = true;
      return;
    }
    this.unmerged = 0;
    this.merging = this.pool
      .query("SELECT gin_clean_pending_list('events_search'::regclass)")
      .then(
        () => {
          this.stats.merges++;
          this.failing = false;
        },
        (err) => {
          // The database restarting or failing over: the index's own limit merges meanwhile.
          if (!this.failing) this.log.warn({ err: (err as Error).message }, 'merging the search index pending list failed');
          this.failing = true;
        },
      )
      .finally(() => {
        this.merging = undefined;
        if (this.again && !this.stopped) {
          this.again = false;
          this.merge();
        }
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.merging;
  }
}
