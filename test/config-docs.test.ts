// The configuration reference is generated from the schema: every variable must carry a description,
// and docs/configuration.md and .env.example must be what `npm run docs:config` writes today.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { CONFIGURATION_MD, ENV_EXAMPLE, documentedSections, renderConfigurationMd, renderEnvExample, variableDoc } from '../scripts/config-docs.js';
import { configSchema, configSections, parseConfig } from '../src/config.js';
import { packageRoot } from '../src/paths.js';

const read = (file: string) => readFileSync(path.join(packageRoot(), file), 'utf8');
const STALE = 'is out of date: run `npm run docs:config` and commit the result';

describe('the configuration reference', () => {
  it('describes every variable of the schema, with an example, each in exactly one section', () => {
    const listed = configSections.flatMap((s) => Object.keys(s.fields));
    expect(listed.sort()).toEqual(Object.keys(configSchema.shape).sort());
    for (const name of listed) {
      const doc = variableDoc(configSchema.shape[name as keyof typeof configSchema.shape] as z.ZodType);
      expect(doc?.description, name).toBeTruthy();
      expect(doc?.example, `${name} has no example`).toBeTruthy();
    }
  });

  it('refuses to render a variable added without a description', () => {
    const fields = configSections[0].fields as Record<string, z.ZodType>;
    fields.UNDOCUMENTED_FOR_TEST = z.string().default('x');
    try {
      expect(() => documentedSections()).toThrow(/UNDOCUMENTED_FOR_TEST has no description/);
    } finally {
      delete fields.UNDOCUMENTED_FOR_TEST;
    }
  });

  it(`docs/configuration.md is what the schema generates`, () => {
    expect(read(CONFIGURATION_MD), `${CONFIGURATION_MD} ${STALE}`).toBe(renderConfigurationMd());
  });

  it(`.env.example is what the schema generates`, () => {
    expect(read(ENV_EXAMPLE), `${ENV_EXAMPLE} ${STALE}`).toBe(renderEnvExample());
  });

  it('.env.example, copied as is, is a valid configuration equal to the defaults', () => {
    const env: Record<string, string> = {};
    for (const line of read(ENV_EXAMPLE).split('\n')) {
      const m = /^([A-Z0-9_]+)=(.*)$/.exec(line);
      if (m) env[m[1]] = m[2];
    }
    expect(Object.keys(env).sort()).toEqual(Object.keys(configSchema.shape).sort());
    expect(parseConfig(env)).toEqual(parseConfig({}));
  });

  it('gives each variable its default, unit and example in the reference', () => {
    const md = renderConfigurationMd();
    expect(md).toContain('### RATE_LIMIT_EVENTS_BURST');
    expect(md).toMatch(/### QUERY_TIMEOUT_MS\n\n[^\n]+\n\nDefault: `5000` · unit: ms · example: `QUERY_TIMEOUT_MS=10000`\./);
    expect(md).toMatch(/### RELAY_URL\n\n[^\n]+\n\nDefault: unset · example: `RELAY_URL=wss:\/\/relay\.example\.com`\./);
  });
});
