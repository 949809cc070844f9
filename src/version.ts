import { readFileSync } from 'node:fs';
import path from 'node:path';
import { packageRoot } from './paths.js';

const pkg = JSON.parse(readFileSync(path.join(packageRoot(), 'package.json'), 'utf8'));
export const VERSION: string = pkg.version;
export const SOFTWARE_URL: string = pkg.homepage;
