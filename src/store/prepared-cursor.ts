// Reusing the plans of REQs with many branches (see SqlQuery.reusePlan). PostgreSQL plans a
// 150-branch UNION ALL in ~8 ms and runs it in ~7; a named statement keeps a generic plan per
// connection, so the second REQ of the same shape only runs. pg-cursor always parses an unnamed
// statement, so NamedCursor parses once per connection under a name and binds that name afterwards.
import { createHash } from 'node:crypto';
import type pg from 'pg';
import Cursor from 'pg-cursor';

/**
 * SQL text kept prepared per connection. A statement and its generic plan take about 100 bytes of
 * backend memory per character of SQL (measured: 500 authors, 102 KB of text, 10.5 MB; 150 #p values,
 * 34 KB, 3.1 MB), so this keeps each connection under ~40 MB of plans: a few feeds and seed queries.
 */
export const MAX_PREPARED_TEXT_PER_CONNECTION = 400_000;

/** Statement names in least-recently-used order, with their text lengths, per connection. */
const statementsByClient = new WeakMap<pg.PoolClient, Map<string, number>>();

// pg's connection object and pg-cursor's internals, as far as submit() touches them (pg-cursor 2.x).
interface WireConnection {
  parsedStatements: Record<string, string>;
  parse(msg: { name: string; text: string }, more: boolean): void;
  bind(msg: { portal: string; statement: string; values: unknown[] | null }, more: boolean): void;
  describe(msg: { type: 'P'; name: string }, more: boolean): void;
  flush(): void;
  once(event: string, listener: () => void): void;
}
interface CursorInternals {
  state: string;
  connection: WireConnection;
  text: string;
  values: unknown[] | null;
  _portal: string;
  _ifNoData: () => void;
  _rowDescription: () => void;
}

let nextPortal = 1;

/** A pg-cursor over a named statement: Parse only the first time this connection sees the name. */
class NamedCursor<Row> extends Cursor<Row> {
  constructor(
    readonly name: string,
    text: string,
    values: unknown[],
  ) {
    super(text, values);
    this.submit = (connection) => this.submitNamed(connection as unknown as WireConnection);
  }

  // pg-cursor's submit() with a statement name on Parse and Bind; pg's client records the name in
  // parsedStatements when ParseComplete arrives (it reads `name` and `text` off the active query).
  private submitNamed(con: WireConnection): void {
    const self = this as unknown as CursorInternals;
    self.state = 'submitted';
    self.connection = con;
    self._portal = `N_${nextPortal++}`;
    if (con.parsedStatements[this.name] === undefined) con.parse({ name: this.name, text: self.text }, true);
    con.bind({ portal: self._portal, statement: this.name, values: self.values }, true);
    con.describe({ type: 'P', name: self._portal }, true);
    con.flush();
    con.once('noData', self._ifNoData);
    con.once('rowDescription', self._rowDescription);
  }
}

const statementName = (text: string) => `req_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;

/**
 * Opens a cursor over `text` as a named statement with a generic plan. The caller must have set
 * `plan_cache_mode = force_generic_plan` on the client (otherwise PostgreSQL plans the first five
 * runs anyway). Deallocates the connection's least recently used statements while their text adds
 * up to more than `budget` (the newest one always stays).
 */
export async function namedCursor<Row>(client: pg.PoolClient, text: string, values: unknown[], budget = MAX_PREPARED_TEXT_PER_CONNECTION): Promise<Cursor<Row>> {
  const name = statementName(text);
  let statements = statementsByClient.get(client);
  if (!statements) statementsByClient.set(client, (statements = new Map()));
  statements.delete(name);
  statements.set(name, text.length);
  let total = 0;
  for (const length of statements.values()) total += length;
  while (total > budget && statements.size > 1) {
    const [oldest, length] = statements.entries().next().value!;
    statements.delete(oldest);
    total -= length;
    const parsed = (client as unknown as { connection: WireConnection }).connection.parsedStatements;
    if (parsed[oldest] === undefined) continue; // its Parse never completed
    await client.query(`DEALLOCATE ${oldest}`);
    delete parsed[oldest];
  }
  return client.query(new NamedCursor<Row>(name, text, values));
}

/** The statements a connection holds, oldest first (for tests). */
export function preparedStatementNames(client: pg.PoolClient): string[] {
  return [...(statementsByClient.get(client)?.keys() ?? [])];
}
