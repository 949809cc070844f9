// Loading events into an EMPTY store in one transaction, for moving to a new relay before it opens.
// What an import into a live store must pay per event, this pays once for the whole load:
//
// - Exclusive locks on `events` and `event_tags` for the whole transaction (the relay must not be
//   running: its reads and writes would wait for the commit), and a check, under them, that both
//   tables are empty: nothing is stored, so there is nothing to replace, delete or collide with.
// - The secondary indexes are dropped and built again at the end: a build sorts each index once,
//   where inserting row by row lands at random places. Measured on 957k events and 1.35M tag rows
//   (PostgreSQL CPU): COPY with every index 41 s; COPY with the primary keys only 14 s, plus 12 s
//   to build the four others. Kept: the primary keys (the importer hands the events over in id
//   order, so their keys are appended, which costs what a build would, and a duplicate fails at
//   once) and the partial indexes (few loaded rows enter them, while a rebuild would scan the
//   whole table for each).
// - event_tags has no foreign key to events, so there is no per-row check to skip.
//
// All or nothing: an interrupted load (Ctrl-C, a crash, a lost connection) rolls back, the tables are
// left empty with every index and constraint in place, and a new run starts over.
import type pg from 'pg';
import { hasSqlState, SQLSTATE } from '../../store/pg-errors.js';
import { copyRows, type EncodedRows } from '../bulk-load.js';

export class TargetNotEmptyError extends Error {}

/** How long to wait for the table locks before concluding that something (a relay) is using the tables. */
const LOCK_TIMEOUT = '10s';
/** Sort memory for the index builds (kB), unless the server is already set higher. */
const BUILD_MEMORY_KB = 1024 * 1024;

/** A secondary index: its qualified name (to drop) and definition (to create again). */
interface Index {
  name: string;
  definition: string;
}

/** The secondary indexes to rebuild: neither partial nor backing a constraint (the primary keys). */
const INDEXES_SQL = `
  SELECT i.indexrelid::regclass::text AS name,
         pg_get_indexdef(i.indexrelid) || coalesce(' TABLESPACE ' || quote_ident(ts.spcname), '') AS definition
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    LEFT JOIN pg_tablespace ts ON ts.oid = c.reltablespace
   WHERE i.indrelid IN ('events'::regclass, 'event_tags'::regclass) AND i.indpred IS NULL
     AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
   ORDER BY i.indrelid, c.relname`;

/**
 * One load: begin() takes the locks and prepares the tables, write() COPYs a chunk (one at a time),
 * finish() rebuilds what was dropped and commits, abort() rolls everything back.
 */
export class EmptyTargetLoad {
  private released = false;

  private constructor(
    private readonly client: pg.PoolClient,
    private readonly indexes: Index[],
  ) {}

  /** Starts the transaction; refuses (TargetNotEmptyError) unless `events` and `event_tags` are empty. */
  static async begin(pool: pg.Pool): Promise<EmptyTargetLoad> {
    const client = await pool.connect();
    // A connection lost while idle between two chunks must fail the load, not the process.
    client.on('error', ignore);
    try {
      await client.query('BEGIN');
      // Building an index may take minutes: a statement timeout meant for REQs must not cut it.
      await client.query('SET LOCAL statement_timeout = 0');
      await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
      try {
        await client.query('LOCK TABLE events, event_tags IN ACCESS EXCLUSIVE MODE');
      } catch (err) {
        if (!hasSqlState(err, SQLSTATE.lockNotAvailable)) throw err;
        throw new Error(`events and event_tags stayed locked for ${LOCK_TIMEOUT}: stop the relay (and anything else using them) first`);
      }
      await client.query('SET LOCAL lock_timeout = 0');
      const { rows } = await client.query<{ stored: boolean }>('SELECT EXISTS (SELECT FROM events) OR EXISTS (SELECT FROM event_tags) AS stored');
      if (rows[0].stored) throw new TargetNotEmptyError('the target already holds events: --empty-target loads only an empty store');

      const indexes = (await client.query<Index>(INDEXES_SQL)).rows;
      if (indexes.length) await client.query(`DROP INDEX ${indexes.map((i) => i.name).join(', ')}`);
      return new EmptyTargetLoad(client, indexes);
    } catch (err) {
      await client.query('ROLLBACK').catch(ignore);
      client.release(true);
      throw err;
    }
  }

  /** COPYs one chunk of events and their tag rows. Await it before writing the next. */
  write(rows: EncodedRows): Promise<void> {
    return copyRows(this.client, rows);
  }

  /** Builds the dropped indexes again, runs `beforeCommit` in the transaction, commits. */
  async finish(beforeCommit?: (client: pg.PoolClient) => Promise<void>): Promise<void> {
    try {
      await this.client.query(
        `SELECT set_config('maintenance_work_mem', greatest(setting::bigint, ${BUILD_MEMORY_KB}) || 'kB', true) FROM pg_settings WHERE name = 'maintenance_work_mem'`,
      );
      for (const index of this.indexes) await this.client.query(index.definition);
      await beforeCommit?.(this.client);
      await this.client.query('COMMIT');
    } catch (err) {
      await this.abort();
      throw err;
    }
    this.released = true;
    this.client.off('error', ignore);
    this.client.release();
  }

  /** Rolls the whole load back: the tables are as they were, empty. */
  async abort(): Promise<void> {
    if (this.released) return;
    this.released = true;
    await this.client.query('ROLLBACK').catch(ignore);
    // Closed rather than pooled: it may be broken, or inside a COPY.
    this.client.release(true);
  }
}

const ignore = () => undefined;
