// Builds dist/ from the TypeScript sources when it is missing or older than them, and only then:
// `npm install` runs it once (the `prepare` script), and every command starts through it
// (scripts/run.mjs), so a developer's edit takes effect on the next run and an unchanged checkout
// starts at once. Plain JavaScript, so it runs before anything is compiled.
//
//   node scripts/build.mjs            build if stale
//   node scripts/build.mjs --force    build
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// The optional native verifier's build, where its script is (the Dockerfile copies this file alone).
const nativeScript = path.join(path.dirname(fileURLToPath(import.meta.url)), 'build-native.mjs');
const { buildNative } = existsSync(nativeScript) ? await import(pathToFileURL(nativeScript).href) : { buildNative: () => 'no native source' };
/** What tsconfig.json compiles, and the file that says how. */
const INPUT_DIRS = ['src', 'migrations', 'scripts', 'bench'];
const INPUT_FILES = ['tsconfig.json'];
/** Written after each successful build, with the time the build started as its mtime. */
const STAMP = path.join(root, 'dist', '.built');

/**
 * The newest modification time among the inputs, in ms. Directories count too: adding, removing or
 * renaming a source file changes its directory's mtime, not any remaining file's.
 */
function newestInput() {
  let newest = 0;
  const visit = (dir) => {
    const dirStat = statSync(dir, { throwIfNoEntry: false });
    if (!dirStat) return;
    newest = Math.max(newest, dirStat.mtimeMs);
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) visit(full);
      else if (/\.(c|m)?ts$/.test(entry.name)) newest = Math.max(newest, statSync(full).mtimeMs);
    }
  };
  INPUT_DIRS.forEach((d) => visit(path.join(root, d)));
  for (const f of INPUT_FILES) newest = Math.max(newest, statSync(path.join(root, f), { throwIfNoEntry: false })?.mtimeMs ?? 0);
  return newest;
}

/** Why dist/ must be rebuilt, or undefined when it is current. */
export function staleReason() {
  const built = statSync(STAMP, { throwIfNoEntry: false });
  if (!built) return 'no build yet';
  return newestInput() > built.mtimeMs ? 'sources changed since the last build' : undefined;
}

/** Compiles with the project's TypeScript. Returns tsc's exit code. */
export function build() {
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  if (!existsSync(tsc)) {
    process.stderr.write('pgrelay: TypeScript is not installed: run `npm install` first\n');
    return 1;
  }
  const started = new Date();
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.json')], { stdio: 'inherit', cwd: root });
  const code = result.status ?? 1;
  if (code === 0) {
    mkdirSync(path.dirname(STAMP), { recursive: true });
    writeFileSync(STAMP, `${started.toISOString()}\n`);
    // An edit made while tsc ran is newer than this, so the next start builds again.
    utimesSync(STAMP, started, started);
  }
  return code;
}

/** Builds when needed; returns 0, or tsc's exit code when the build failed. */
export function ensureBuilt({ quiet = false } = {}) {
  // An installed package (no sources beside it) runs the dist/ it ships.
  if (!existsSync(path.join(root, 'src'))) return 0;
  // The optional native verifier: tried when its source changed, never an error (build-native.mjs).
  const native = buildNative();
  if (!quiet && /built|not built/.test(native) && !/up to date|unchanged/.test(native)) process.stderr.write(`pgrelay: ${native}\n`);
  const reason = staleReason();
  if (!reason) return 0;
  if (!quiet) process.stderr.write(`pgrelay: building (${reason})…\n`);
  return build();
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const force = process.argv.includes('--force');
  if (!existsSync(path.join(root, 'src'))) process.exit(0); // e.g. `npm ci` before the sources are copied in (Dockerfile)
  if (force) buildNative({ force: true });
  process.exit(force ? build() : ensureBuilt());
}
