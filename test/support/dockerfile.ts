// The Dockerfile, replayed without Docker: each stage gets a temporary folder that stands for its
// filesystem's root, COPY copies from the repository (leaving out what .dockerignore names) or from an
// earlier stage's folder, RUN runs its npm and node commands in the stage's WORKDIR, and the last
// stage's CMD can then be started there. This machine's Node and npm stand in for the base image's.
// An instruction, flag or shell construct the replay does not know fails the parse or the replay,
// naming its line, so a Dockerfile that grows one breaks the test instead of being half-replayed.
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, cpSync } from 'node:fs';
import path from 'node:path';

export type Instruction = { line: number } & (
  | { op: 'WORKDIR'; path: string }
  | { op: 'COPY'; from?: string; sources: string[]; dest: string }
  | { op: 'ENV'; vars: Record<string, string> }
  /** A shell line split at `&&` into commands, each a list of words. */
  | { op: 'RUN'; commands: string[][] }
  | { op: 'CMD'; argv: string[] }
  | { op: 'VOLUME' | 'USER' | 'EXPOSE'; words: string[] }
);

export interface Stage {
  image: string;
  name?: string;
  line: number;
  instructions: Instruction[];
}

/** What a replayed stage left: its root folder and the state its instructions set. */
export interface ReplayedStage {
  name?: string;
  root: string;
  /** The WORKDIR as the image sees it (an absolute path inside the stage). */
  workdir: string;
  env: Record<string, string>;
  cmd?: string[];
  volumes: string[];
  user?: string;
  exposed: string[];
}

const SHELL_SYNTAX = /["'`$;|<>()\\*?~{}]/;

function fail(line: number, message: string): never {
  throw new Error(`Dockerfile line ${line}: ${message}`);
}

function parseEnv(rest: string, line: number): Record<string, string> {
  if (SHELL_SYNTAX.test(rest)) fail(line, `ENV with quotes or substitutions is not replayed: ${rest}`);
  const words = rest.split(/\s+/).filter(Boolean);
  // `ENV KEY value with spaces` (the old form) or `ENV A=1 B=2`.
  if (words.length && !words[0].includes('=')) return { [words[0]]: words.slice(1).join(' ') };
  const vars: Record<string, string> = {};
  for (const word of words) {
    const eq = word.indexOf('=');
    if (eq <= 0) fail(line, `ENV word without a name: ${word}`);
    vars[word.slice(0, eq)] = word.slice(eq + 1);
  }
  return vars;
}

function parseRun(rest: string, line: number): string[][] {
  if (rest.startsWith('[')) fail(line, 'RUN in exec form is not replayed');
  if (SHELL_SYNTAX.test(rest.replace(/&&/g, ''))) fail(line, `RUN with shell syntax other than && is not replayed: ${rest}`);
  const commands: string[][] = [[]];
  for (const word of rest.split(/\s+/).filter(Boolean)) {
    if (word === '&&') commands.push([]);
    else if (word.includes('&')) fail(line, `RUN with & is not replayed: ${rest}`);
    else commands[commands.length - 1].push(word);
  }
  if (commands.some((c) => c.length === 0)) fail(line, `RUN with an empty command: ${rest}`);
  return commands;
}

/** The stages of a Dockerfile, in order; throws on anything the replay would not perform faithfully. */
export function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = i + 1;
    let source = lines[i].trim();
    if (!source || source.startsWith('#')) continue;
    // A trailing backslash continues the instruction on the next line (comment lines inside are dropped).
    while (source.endsWith('\\') && i + 1 < lines.length) {
      const next = lines[++i].trim();
      source = source.slice(0, -1).trimEnd() + (next.startsWith('#') ? '' : ' ' + next);
    }
    const match = /^(\S+)\s*(.*)$/.exec(source)!;
    const op = match[1].toUpperCase();
    const rest = match[2].trim();
    if (op === 'FROM') {
      const from = /^(?<image>[^\s-][^\s]*)(?:\s+AS\s+(?<name>\S+))?$/i.exec(rest);
      if (!from) fail(line, `FROM not understood: ${rest}`);
      if (stages.some((s) => s.name === from.groups!.image)) fail(line, 'FROM an earlier stage is not replayed');
      stages.push({ image: from.groups!.image, name: from.groups!.name, line, instructions: [] });
      continue;
    }
    const stage = stages.at(-1) ?? fail(line, `${op} before any FROM`);
    const words = rest.split(/\s+/).filter(Boolean);
    switch (op) {
      case 'WORKDIR':
        if (words.length !== 1 || SHELL_SYNTAX.test(rest)) fail(line, `WORKDIR not understood: ${rest}`);
        stage.instructions.push({ line, op, path: rest });
        break;
      case 'COPY': {
        if (rest.startsWith('[') || SHELL_SYNTAX.test(rest)) fail(line, `COPY in exec form or with wildcards is not replayed: ${rest}`);
        let from: string | undefined;
        while (words[0]?.startsWith('--')) {
          const flag = words.shift()!;
          if (flag.startsWith('--from=')) from = flag.slice('--from='.length);
          else fail(line, `COPY flag not replayed: ${flag}`);
        }
        if (words.length < 2) fail(line, `COPY needs a source and a destination: ${rest}`);
        if (from && !stages.slice(0, -1).some((s) => s.name === from)) fail(line, `COPY --from=${from} names no earlier stage`);
        const dest = words.pop()!;
        if (words.length > 1 && !dest.endsWith('/')) fail(line, 'COPY of several sources needs a destination ending in /');
        stage.instructions.push({ line, op, from, sources: words, dest });
        break;
      }
      case 'ENV':
        stage.instructions.push({ line, op, vars: parseEnv(rest, line) });
        break;
      case 'RUN':
        stage.instructions.push({ line, op, commands: parseRun(rest, line) });
        break;
      case 'CMD': {
        let argv: unknown;
        try {
          argv = JSON.parse(rest);
        } catch {
          fail(line, `CMD must be in exec form (a JSON array): ${rest}`);
        }
        if (!Array.isArray(argv) || !argv.length || !argv.every((a) => typeof a === 'string')) fail(line, `CMD must be a JSON array of strings: ${rest}`);
        stage.instructions.push({ line, op, argv });
        break;
      }
      case 'VOLUME':
      case 'USER':
      case 'EXPOSE':
        if (rest.startsWith('[') || SHELL_SYNTAX.test(rest)) fail(line, `${op} not understood: ${rest}`);
        stage.instructions.push({ line, op, words });
        break;
      default:
        fail(line, `the replay does not know the instruction ${op}: teach test/support/dockerfile.ts what it means`);
    }
  }
  if (!stages.length) throw new Error('Dockerfile: no FROM');
  return stages;
}

/**
 * `.dockerignore` patterns as Docker reads them: a path is left out when a pattern matches it or one
 * of its parent folders (so a left-out folder is not walked into).
 */
export function dockerignoreMatcher(text: string): (relPath: string) => boolean {
  const patterns = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      // Exceptions would bring files back from inside a left-out folder, which the copy does not walk.
      if (/^!|[[\\]/.test(l)) throw new Error(`.dockerignore: exceptions, character classes and escapes are not replayed: ${l}`);
      const source = path.posix
        .normalize(l)
        .replace(/^\/+/, '')
        .split(/(\*\*\/|\*\*|\*|\?)/)
        .map((part) => ({ '**/': '(?:.*/)?', '**': '.*', '*': '[^/]*', '?': '[^/]' })[part] ?? part.replace(/[.+^${}()|]/g, '\\$&'))
        .join('');
      return new RegExp(`^${source}$`);
    });
  return (relPath) => {
    const parts = relPath.split('/');
    return parts.some((_, i) => patterns.some((p) => p.test(parts.slice(0, i + 1).join('/'))));
  };
}

/** Copies `rel` (a file or a folder's contents) from the build context to `dest`, leaving out what is ignored. */
function copyFromContext(context: string, rel: string, dest: string, ignored: (relPath: string) => boolean): void {
  const source = path.join(context, rel);
  const stat = lstatSync(source);
  if (stat.isDirectory()) {
    mkdirSync(dest, { recursive: true });
    for (const name of readdirSync(source)) {
      const childRel = rel === '.' ? name : `${rel}/${name}`;
      if (!ignored(childRel)) copyFromContext(context, childRel, path.join(dest, name), ignored);
    }
  } else if (stat.isSymbolicLink()) {
    symlinkSync(readlinkSync(source), dest);
  } else {
    copyFileSync(source, dest);
  }
}

/** `command` with `args`, in `cwd`; throws with the tail of its output when it does not exit 0. */
function run(command: string, args: string[], cwd: string, env: Record<string, string>, line: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`Dockerfile line ${line}: \`${[path.basename(command), ...args].join(' ')}\` exited with ${code ?? signal}:\n${output}`));
    });
  });
}

/**
 * The environment RUN and CMD start from, as in the base image: PATH (without any node_modules/.bin
 * the test runner put on it) and HOME, whose npm cache and settings `npm ci` uses. Not the test's
 * own environment, which carries npm's and vitest's variables.
 */
export function baseEnv(): Record<string, string> {
  const PATH = (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir && !dir.includes('node_modules'))
    .join(path.delimiter);
  return {
    PATH,
    HOME: process.env.HOME ?? '/root',
    // The lockfile pins each package's integrity, so the cache holds exactly what the registry
    // would send: take it from there when it is, and skip the audit's request.
    npm_config_prefer_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
  };
}

/** Where the absolute image path `imagePath` of a replayed stage lives on this machine. */
export function hostPath(stage: Pick<ReplayedStage, 'root'>, imagePath: string): string {
  if (!path.posix.isAbsolute(imagePath)) throw new Error(`not an absolute path in the image: ${imagePath}`);
  return path.join(stage.root, imagePath);
}

/**
 * Replays every stage, each in a new folder under `workRoot`, copying from `context` (the
 * repository). Returns the stages in order; the last is the image.
 */
export async function replayDockerfile(stages: Stage[], context: string, workRoot: string): Promise<ReplayedStage[]> {
  const ignored = dockerignoreMatcher(existsSync(path.join(context, '.dockerignore')) ? readFileSync(path.join(context, '.dockerignore'), 'utf8') : '');
  const done: ReplayedStage[] = [];
  for (const [index, stage] of stages.entries()) {
    const root = path.join(workRoot, `stage-${index}${stage.name ? `-${stage.name}` : ''}`);
    mkdirSync(root, { recursive: true });
    const state: ReplayedStage = { name: stage.name, root, workdir: '/', env: {}, volumes: [], exposed: [] };
    const inImage = (p: string) => path.posix.resolve(state.workdir, p);
    for (const step of stage.instructions) {
      switch (step.op) {
        case 'WORKDIR':
          state.workdir = inImage(step.path);
          mkdirSync(hostPath(state, state.workdir), { recursive: true });
          break;
        case 'ENV':
          Object.assign(state.env, step.vars);
          break;
        case 'COPY':
          for (const source of step.sources) {
            const destImage = inImage(step.dest);
            let dest = hostPath(state, destImage);
            if (step.from) {
              const from = done.find((s) => s.name === step.from)!;
              const src = hostPath(from, path.posix.resolve(from.workdir, source));
              if (!existsSync(src)) fail(step.line, `COPY --from=${step.from} ${source}: not in that stage`);
              if (statSync(src).isFile() && (step.dest.endsWith('/') || existsSync(dest))) dest = path.join(dest, path.basename(src));
              mkdirSync(path.dirname(dest), { recursive: true });
              cpSync(src, dest, { recursive: true, verbatimSymlinks: true });
              continue;
            }
            const rel = path.posix.normalize(source).replace(/\/+$/, '');
            if (rel.startsWith('..') || path.posix.isAbsolute(rel)) fail(step.line, `COPY ${source}: outside the build context`);
            if (!existsSync(path.join(context, rel))) fail(step.line, `COPY ${source}: not in the build context`);
            if (rel !== '.' && ignored(rel)) fail(step.line, `COPY ${source}: left out of the build context by .dockerignore`);
            if (lstatSync(path.join(context, rel)).isFile() && (step.dest.endsWith('/') || existsSync(dest))) dest = path.join(dest, path.basename(rel));
            mkdirSync(path.dirname(dest), { recursive: true });
            copyFromContext(context, rel, dest, ignored);
          }
          break;
        case 'RUN': {
          const cwd = hostPath(state, state.workdir);
          for (const [command, ...args] of step.commands) {
            if (command === 'npm' && args[0] === 'cache' && args[1] === 'clean') {
              // In the image it keeps the layer small; here it would empty this machine's npm cache.
              continue;
            }
            if (command === 'npm') await run('npm', args, cwd, { ...baseEnv(), ...state.env }, step.line);
            else if (command === 'node') await run(process.execPath, args, cwd, { ...baseEnv(), ...state.env }, step.line);
            else if (command === 'mkdir' && args[0] === '-p' && args.length > 1) {
              for (const dir of args.slice(1)) mkdirSync(hostPath(state, inImage(dir)), { recursive: true });
            } else if (command === 'rm' && args[0] === '-rf' && args.length > 1) {
              for (const target of args.slice(1)) rmSync(hostPath(state, inImage(target)), { recursive: true, force: true });
            } else if (command === 'chown') {
              // Ownership for the image's USER, which is not switched to (below): what the replay made is the test user's already.
              continue;
            } else fail(step.line, `RUN command not replayed: ${[command, ...args].join(' ')}`);
          }
          break;
        }
        case 'CMD':
          state.cmd = step.argv;
          break;
        case 'VOLUME':
          state.volumes.push(...step.words);
          break;
        case 'USER':
          // Recorded, not switched to: everything runs as the user running the test (the image's user need not exist here).
          state.user = step.words[0];
          break;
        case 'EXPOSE':
          state.exposed.push(...step.words);
          break;
      }
    }
    done.push(state);
  }
  return done;
}

export interface StartedImage {
  url: string;
  /** Everything the process wrote, stdout and stderr, for a failure's message. */
  output: string[];
  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. Resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Starts the stage's CMD in its WORKDIR with its ENV and `overrides` (on top of baseEnv()), and waits
 * for the relay's `relay listening` log line. `node` is this machine's Node.
 */
export async function startCmd(stage: ReplayedStage, overrides: Record<string, string>, timeoutMs: number): Promise<StartedImage> {
  if (!stage.cmd) throw new Error('the image has no CMD');
  const [command, ...args] = stage.cmd;
  const child = spawn(command === 'node' ? process.execPath : command, args, {
    cwd: hostPath(stage, stage.workdir),
    env: { ...baseEnv(), ...stage.env, ...overrides },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (graceMs = 60_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
  child.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the CMD did not log "relay listening" within ${timeoutMs} ms`)), timeoutMs);
      child.once('error', reject);
      child.once('exit', (code, signal) => reject(new Error(`the CMD exited with ${code ?? signal} before listening`)));
      let pending = '';
      child.stdout.on('data', (chunk: Buffer) => {
        output.push(chunk.toString());
        pending += chunk.toString();
        const lines = pending.split('\n');
        pending = lines.pop()!;
        for (const line of lines) {
          try {
            const entry = JSON.parse(line);
            if (entry.msg === 'relay listening') {
              clearTimeout(timer);
              resolve(entry.url);
            }
          } catch {
            /* not a log line */
          }
        }
      });
    });
    return { url, output, stop };
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}\n${output.join('').slice(-20_000)}`);
  }
}
