// Commands start through scripts/run.mjs, which builds dist/ only when it is missing or older than
// the sources: an unchanged checkout starts at once, an edited one runs the edit. Tried on a small
// project of its own (the launcher, a tsconfig, one source file), never on this checkout's dist/.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/paths.js';
import { serverPass } from '../support/server-pass.js';

let project: string;
// No @types/node in this project (it would make each build seconds slower): declare what it uses.
const source = (text: string) =>
  `declare const process: { argv: string[] };\nconst greeting: string = ${JSON.stringify(text)};\nconsole.log([greeting, ...process.argv.slice(2)].join(' '));\n`;
/** Dates the last build a minute back, so what is written now is newer than it, as an edit would be. */
const ageBuild = () => utimesSync(path.join(project, 'dist/.built'), new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));

function run(...args: string[]) {
  const r = spawnSync(process.execPath, ['scripts/run.mjs', 'src/hello.js', ...args], { cwd: project, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(() => {
  project = mkdtempSync(path.join(tmpdir(), 'pgrelay-launcher-'));
  cpSync(path.join(packageRoot(), 'scripts/run.mjs'), path.join(project, 'scripts/run.mjs'));
  cpSync(path.join(packageRoot(), 'scripts/build.mjs'), path.join(project, 'scripts/build.mjs'));
  cpSync(path.join(packageRoot(), 'scripts/build-native.mjs'), path.join(project, 'scripts/build-native.mjs')); // no native/ here: nothing to build
  symlinkSync(path.join(packageRoot(), 'node_modules'), path.join(project, 'node_modules'));
  writeFileSync(path.join(project, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', outDir: 'dist', rootDir: '.', strict: true, types: [] }, include: ['src/**/*.ts'] }),
  );
  mkdirSync(path.join(project, 'src'));
  writeFileSync(path.join(project, 'src/hello.ts'), source('hello'));
});
afterAll(() => rmSync(project, { recursive: true, force: true }));

describe.skipIf(serverPass)('the launcher', () => {
  it('builds a checkout that has no build yet, then runs the entry with its arguments', () => {
    const first = run('a', 'b');
    expect(first).toMatchObject({ code: 0, stdout: 'hello a b\n' });
    expect(first.stderr).toMatch(/building \(no build yet\)/);
  });

  it('does not build again when nothing changed', () => {
    const again = run('c');
    expect(again).toEqual({ code: 0, stdout: 'hello c\n', stderr: '' });
  });

  it('rebuilds when a source is edited, and runs the edit', () => {
    const file = path.join(project, 'src/hello.ts');
    ageBuild();
    writeFileSync(file, source('edited'));
    const edited = run();
    expect(edited).toMatchObject({ code: 0, stdout: 'edited\n' });
    expect(edited.stderr).toMatch(/building \(sources changed since the last build\)/);
    expect(run()).toEqual({ code: 0, stdout: 'edited\n', stderr: '' });
  });

  it('sees a source file added as a change (its folder changed, not any file it compares)', async () => {
    const { staleReason } = (await import(pathToFileURL(path.join(project, 'scripts/build.mjs')).href)) as { staleReason(): string | undefined };
    expect(staleReason()).toBeUndefined();
    writeFileSync(path.join(project, 'src/more.ts'), 'export const more = 1;\n');
    // A file copied in keeps its old mtime: only its folder says something changed.
    utimesSync(path.join(project, 'src/more.ts'), new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    expect(staleReason()).toBe('sources changed since the last build');
  });

  it('refuses to start a stale build when the edit does not compile', () => {
    const file = path.join(project, 'src/hello.ts');
    ageBuild();
    writeFileSync(file, 'const greeting: number = "not a number";\n');
    const broken = run();
    expect(broken.code).not.toBe(0);
    expect(broken.stdout).not.toMatch(/edited|not a number/);
    expect(broken.stderr).toMatch(/the build failed/);
  });
});
