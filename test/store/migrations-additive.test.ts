// Migrations are additive (docs/deploy.md, Upgrading without downtime): during a rolling upgrade the
// processes of the previous release keep serving on the schema the new one migrated, so no migration
// may take away or change what their SQL uses. Checked on the schema each migration leaves, not on
// its text: each is applied in turn to an empty database and the catalog compared before and after.
// What the catalog shows and old SQL depends on: tables, columns (name, type, nullability),
// unique indexes (ON CONFLICT finds them by their columns), and constraints over existing columns.
// What it cannot show (a function, trigger or view whose meaning changed) stays the author's care.
import type { Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { createKnex } from '../../src/store/database.js';
import { createTestDatabase } from '../support/database.js';

interface Column {
  type: string;
  nullable: boolean;
  hasDefault: boolean;
}

interface Schema {
  /** table → column → its shape */
  tables: Map<string, Map<string, Column>>;
  /** "table: definition" of each unique index, its name left out */
  uniqueIndexes: Set<string>;
  /** CHECK and FOREIGN KEY constraints: name, table, and the columns they read */
  constraints: Array<{ name: string; table: string; columns: string[] }>;
}

async function readSchema(client: pg.Client): Promise<Schema> {
  const columns = await client.query<{ table: string; column: string; type: string; nullable: boolean; has_default: boolean }>(`
    SELECT c.relname AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type,
           NOT a.attnotnull AS nullable, (a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '') AS has_default
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped`);
  const tables = new Map<string, Map<string, Column>>();
  for (const r of columns.rows) {
    if (!tables.has(r.table)) tables.set(r.table, new Map());
    tables.get(r.table)!.set(r.column, { type: r.type, nullable: r.nullable, hasDefault: r.has_default });
  }
  const unique = await client.query<{ table: string; definition: string }>(`
    SELECT t.relname AS table, regexp_replace(pg_get_indexdef(i.indexrelid), '^CREATE UNIQUE INDEX \\S+ ON ', '') AS definition
      FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = 'public' AND i.indisunique`);
  const constraints = await client.query<{ name: string; table: string; columns: string[] }>(`
    SELECT con.conname AS name, t.relname AS table,
           array(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = con.conrelid AND a.attnum = ANY(con.conkey) ORDER BY a.attnum)::text[] AS columns
      FROM pg_constraint con JOIN pg_class t ON t.oid = con.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = 'public' AND con.contype IN ('c', 'f')`);
  return {
    tables,
    uniqueIndexes: new Set(unique.rows.map((r) => `${r.table}: ${r.definition}`)),
    constraints: constraints.rows,
  };
}

/** What a process that knows only `before` could trip over in `after`; empty when the change is additive. */
function breaksOldProcesses(before: Schema, after: Schema): string[] {
  const problems: string[] = [];
  for (const [table, columns] of before.tables) {
    const now = after.tables.get(table);
    if (!now) {
      problems.push(`table ${table} dropped or renamed`);
      continue;
    }
    for (const [name, was] of columns) {
      const is = now.get(name);
      if (!is) problems.push(`column ${table}.${name} dropped or renamed`);
      else if (is.type !== was.type) problems.push(`column ${table}.${name} changed type from ${was.type} to ${is.type}`);
      else if (was.nullable && !is.nullable) problems.push(`column ${table}.${name} made NOT NULL`);
    }
    for (const [name, is] of now)
      if (!columns.has(name) && !is.nullable && !is.hasDefault) problems.push(`column ${table}.${name} added NOT NULL without a default`);
  }
  for (const index of before.uniqueIndexes) if (!after.uniqueIndexes.has(index)) problems.push(`unique index ${index} dropped or changed`);
  const known = new Set(before.constraints.map((c) => c.name));
  for (const c of after.constraints) {
    const old = c.columns.filter((column) => before.tables.get(c.table)?.has(column));
    if (!known.has(c.name) && old.length) problems.push(`constraint ${c.name} added over existing columns ${c.table}.(${old.join(', ')})`);
  }
  return problems;
}

let knex: Knex;
let client: pg.Client;
beforeAll(async () => {
  const url = await createTestDatabase({ empty: true });
  knex = await createKnex(url);
  client = new pg.Client({ connectionString: url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await knex?.destroy();
});

describe('migrations are additive', () => {
  it('no migration drops, renames or retypes a table or column, makes one NOT NULL, adds one NOT NULL without a default, drops a unique index, or constrains existing columns', async () => {
    const problems: Record<string, string[]> = {};
    let schema = await readSchema(client);
    for (const name of Object.keys(migrations).sort()) {
      await migrations[name].up(knex);
      const next = await readSchema(client);
      const found = breaksOldProcesses(schema, next);
      if (found.length) problems[name] = found;
      schema = next;
    }
    expect(problems).toEqual({});
    expect(schema.tables.has('events')).toBe(true); // the catalog query saw the migrated schema
  });

  it('the check finds each kind of change an old process trips over', async () => {
    await client.query(`
      CREATE TABLE check_a (id bigint PRIMARY KEY, kept text, gone text, renamed text, retyped int, tightened text, checked int);
      CREATE TABLE check_b (id bigint);
      CREATE UNIQUE INDEX check_a_kept ON check_a (kept);`);
    const before = await readSchema(client);
    await client.query(`
      DROP TABLE check_b;
      ALTER TABLE check_a DROP COLUMN gone;
      ALTER TABLE check_a RENAME COLUMN renamed TO renamed_to;
      ALTER TABLE check_a ALTER COLUMN retyped TYPE bigint;
      ALTER TABLE check_a ALTER COLUMN tightened SET NOT NULL;
      ALTER TABLE check_a ADD COLUMN required text NOT NULL, ADD COLUMN optional text, ADD COLUMN defaulted int NOT NULL DEFAULT 0;
      ALTER TABLE check_a ADD CONSTRAINT check_a_positive CHECK (checked > 0);
      DROP INDEX check_a_kept;`);
    expect(breaksOldProcesses(before, await readSchema(client)).sort()).toEqual(
      [
        'table check_b dropped or renamed',
        'column check_a.gone dropped or renamed',
        'column check_a.renamed dropped or renamed',
        'column check_a.retyped changed type from integer to bigint',
        'column check_a.tightened made NOT NULL',
        'column check_a.required added NOT NULL without a default',
        'unique index check_a: public.check_a USING btree (kept) dropped or changed',
        'constraint check_a_positive added over existing columns check_a.(checked)',
      ].sort(),
    );
  });
});
