// Finding an optional peer's binary (nginx, strfry): the environment variable that names it, else
// the name on PATH, else the places our installers put it.
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

export function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `process.env[variable]` when set (undefined if it is not executable), else `name` on PATH, else the first of `fallbacks`. */
export function findExecutable(variable: string, name: string, fallbacks: string[]): string | undefined {
  const named = process.env[variable];
  if (named) return executable(named) ? named : undefined;
  const onPath = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((dir) => path.join(dir, name));
  return [...onPath, ...fallbacks].find(executable);
}

/**
 * A test file that needs an optional peer skips without it, saying why; where the peers must be
 * there (CI sets REQUIRE_PEERS=1 after installing them), it fails instead, so nothing is skipped
 * unnoticed.
 */
export function skipWithout(found: boolean, why: string): boolean {
  if (found) return false;
  if (process.env.REQUIRE_PEERS === '1') throw new Error(`${why} (REQUIRE_PEERS=1: this run needs every optional peer)`);
  console.warn(why);
  return true;
}
