// docs/configuration.md and .env.example, generated from the configuration schema (src/config.ts) so
// that they are never out of date: `npm run docs:config` writes both; test/config-docs.test.ts fails
// when a variable has no description or a file differs from what this would write.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { configSchema, configSections, type VariableDoc } from '../src/config.js';
import { packageRoot } from '../src/paths.js';

export interface DocumentedVariable extends VariableDoc {
  name: string;
  /** The default as it would be written in .env ('' when unset). */
  default: string;
}

/** The text an environment variable would hold to give this parsed value. */
function asEnvText(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (Array.isArray(value)) return value.join(',');
  return String(value);
}

/** The manual's text of a variable's schema, or undefined when it has none. */
export function variableDoc(schema: z.ZodType): VariableDoc | undefined {
  const meta = z.globalRegistry.get(schema) as Partial<VariableDoc> | undefined;
  return meta?.description ? { description: meta.description, unit: meta.unit, example: meta.example } : undefined;
}

/** Every variable with its section, in the manual's order. Throws when one has no description. */
export function documentedSections(): { title: string; intro?: string; variables: DocumentedVariable[] }[] {
  const defaults = configSchema.parse({}) as Record<string, unknown>;
  return configSections.map((s) => ({
    title: s.title,
    intro: s.intro,
    variables: Object.entries(s.fields).map(([name, schema]) => {
      const doc = variableDoc(schema as z.ZodType);
      if (!doc) throw new Error(`${name} has no description in src/config.ts: wrap its schema in documented(…)`);
      return { name, default: asEnvText(defaults[name]), ...doc };
    }),
  }));
}

const anchor = (title: string) => title.toLowerCase().replace(/[^a-z0-9 -]/g, '').trim().replace(/ /g, '-');

export function renderConfigurationMd(): string {
  const sections = documentedSections();
  const out: string[] = [
    '# Configuration',
    '',
    '<!-- Generated from src/config.ts by `npm run docs:config`: edit the descriptions there. -->',
    '',
    'pgrelay reads its settings from environment variables, and from a `.env` file in the folder it',
    'starts in (a variable set in the environment wins). Every variable is optional. A bad value stops',
    'start-up with a line naming the variable. [`.env.example`](../.env.example) lists them all with',
    'their defaults, ready to copy to `.env`. The operator commands (`npm run cli`) read the same',
    'settings.',
    '',
    '| variable | default | unit |',
    '|---|---|---|',
  ];
  for (const s of sections)
    for (const v of s.variables) out.push(`| [\`${v.name}\`](#${v.name.toLowerCase()}) | ${v.default === '' ? '(unset)' : `\`${v.default}\``} | ${v.unit ?? ''} |`);
  for (const s of sections) {
    out.push('', `## ${s.title}`, '');
    if (s.intro) out.push(s.intro, '');
    for (const v of s.variables) {
      out.push(`### ${v.name}`, '', v.description, '');
      const facts = [`Default: ${v.default === '' ? 'unset' : `\`${v.default}\``}`];
      if (v.unit) facts.push(`unit: ${v.unit}`);
      if (v.example) facts.push(`example: \`${v.name}=${v.example}\``);
      out.push(`${facts.join(' · ')}.`, '');
    }
  }
  out.push(`Sections: ${sections.map((s) => `[${s.title}](#${anchor(s.title)})`).join(', ')}.`, '');
  return out.join('\n');
}

/** Words of `text` in lines of at most `width` characters, each starting with `prefix`. */
function wrap(text: string, prefix: string, width = 100): string[] {
  const lines: string[] = [];
  let line = prefix;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line.length > prefix.length && line.length + 1 + word.length > width) {
      lines.push(line);
      line = prefix;
    }
    line += (line.length > prefix.length ? ' ' : '') + word;
  }
  if (line.length > prefix.length) lines.push(line);
  return lines;
}

export function renderEnvExample(): string {
  const out: string[] = [
    '# pgrelay configuration. Copy to .env, or set in the environment (the environment wins).',
    '# Every variable is optional; the value shown is the default. docs/configuration.md says the same.',
    '# Generated from src/config.ts by `npm run docs:config`: edit the descriptions there.',
  ];
  for (const s of documentedSections()) {
    out.push('', `# --- ${s.title} ${'-'.repeat(Math.max(3, 94 - s.title.length))}`);
    if (s.intro) out.push(...wrap(s.intro, '# '));
    for (const v of s.variables) {
      out.push('');
      const tail = [v.unit && `Unit: ${v.unit}.`, v.example && `Example: ${v.name}=${v.example}`].filter(Boolean).join(' ');
      out.push(...wrap(`${v.description}${tail ? ` ${tail}` : ''}`, '# '));
      out.push(`${v.name}=${v.default}`);
    }
  }
  out.push('');
  return out.join('\n');
}

export const CONFIGURATION_MD = 'docs/configuration.md';
export const ENV_EXAMPLE = '.env.example';

if (process.argv.includes('--write')) {
  const root = packageRoot();
  writeFileSync(path.join(root, CONFIGURATION_MD), renderConfigurationMd());
  writeFileSync(path.join(root, ENV_EXAMPLE), renderEnvExample());
  console.log(`wrote ${CONFIGURATION_MD} and ${ENV_EXAMPLE}`);
}
