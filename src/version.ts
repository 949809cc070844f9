import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** package.json sits above both src/ (tests) and dist/src/ (the build). */
function readPackageJson(): { version: string; homepage: string } {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  return JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
}

const pkg = readPackageJson();
export const VERSION = pkg.version;
export const SOFTWARE_URL = pkg.homepage;
