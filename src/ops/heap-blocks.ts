// Walking `events` by heap blocks, for the backfill commands (backfill-tags, backfill-search): each
// batch is a range of consecutive blocks read with a TID range scan, so a run reads the table once,
// in storage order. The checkpoint names the next block and the table's file, so a table rewritten
// meanwhile (VACUUM FULL, CLUSTER) is noticed rather than resumed at a meaningless block.
import type pg from 'pg';
import type { Logger } from '../log.js';
import { readCheckpoint } from './checkpoint.js';
import { estimatedEvents } from './progress.js';

/** A batch: the heap blocks [from, to) of `events`. */
export interface BlockRange {
  from: number;
  to: number;
}

/** The TID range of a block range, bound as $1 and $2: `ctid >= $1::tid AND ctid < $2::tid`. */
export const tidBounds = (r: BlockRange) => [`(${r.from},0)`, `(${r.to},0)`];

/** The heap of `events` as the run starts: its size in blocks, its file, its events per block. */
export interface Heap {
  blocks: number;
  /** Changes when the table is rewritten (VACUUM FULL, CLUSTER): block numbers then mean nothing. */
  filenode: string;
  eventsPerBlock: number;
}

export async function readHeap(pool: pg.Pool): Promise<Heap> {
  const { rows } = await pool.query<{ blocks: string; filenode: string; per_block: number | null }>(
    `SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS blocks,
            pg_relation_filenode(c.oid)::text AS filenode,
            CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages END AS per_block
       FROM pg_class c WHERE c.oid = 'events'::regclass`,
  );
  const blocks = Number(rows[0].blocks);
  const eventsPerBlock = rows[0].per_block ?? (blocks > 0 ? (await estimatedEvents(pool)) / blocks : 0);
  return { blocks, filenode: rows[0].filenode, eventsPerBlock };
}

/** The checkpoint's position: the next block to do, and the table's file it counts blocks in. */
export const positionText = (nextBlock: number, heap: Heap) => `block ${nextBlock} of relfilenode ${heap.filenode}`;
const POSITION = /^block (\d+) of relfilenode (\d+)$/;

/**
 * Where to resume the job `name`: the saved block and counts, unless there is no checkpoint or it
 * cannot be used (then undefined: start from block 0). A position that is no block number comes
 * from an earlier version of the command (backfill-tags once saved event ids).
 */
export async function readBlockCheckpoint<Counts>(pool: pg.Pool, name: string, heap: Heap, log?: Logger): Promise<{ block: number; counts: Partial<Counts> } | undefined> {
  const checkpoint = await readCheckpoint<Partial<Counts>>(pool, name);
  if (!checkpoint) return undefined;
  const match = POSITION.exec(checkpoint.position);
  if (!match) {
    log?.warn({ position: checkpoint.position }, `${name}: the checkpoint is from an earlier version (not a heap block) and cannot be resumed: starting from the first block`);
    return undefined;
  }
  if (match[2] !== heap.filenode) {
    log?.warn({ position: checkpoint.position }, `${name}: events was rewritten (VACUUM FULL, CLUSTER) since the checkpoint: starting from the first block`);
    return undefined;
  }
  return { block: Number(match[1]), counts: checkpoint.counts };
}
