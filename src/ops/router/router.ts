// strfry's `router` (docs/router.md) on our store: the streams of one configuration file, kept in
// step with the file while it runs. A change is applied with the least disturbance (strfry's "hot
// reconfig"): a new stream or URL opens its connections, a removed one closes them, a changed
// plugin is replaced in place, top-level settings apply from their next use; only a stream whose
// `dir` or `filter` changed has its connections opened again (its positions stay, so it catches up).
// A file that no longer parses is logged and the running configuration stays.
import { readFile } from 'node:fs/promises';
import type { Logger } from '../../log.js';
import { needsReconnect, parseRouterConfig, RouterConfigError, type RouterConfig } from './config.js';
import { DEFAULT_TIMINGS, type RouterHost, type RouterTimings } from './host.js';
import { Intake } from './intake.js';
import type { RouterRuntime, RouterSettings } from './link.js';
import { RouterMetrics } from './metrics.js';
import { Stream } from './stream.js';

export class Router {
  private readonly streams = new Map<string, Stream>();
  private readonly rt: RouterRuntime;
  private readonly settings: RouterSettings;
  private applying: Promise<void> = Promise.resolve();
  private watcher: NodeJS.Timeout | undefined;
  private lastText: string | undefined;
  private stopped = false;

  constructor(host: RouterHost, timings: Partial<RouterTimings> = {}) {
    this.settings = { connectionTimeout: 20, verbose: true, catchUpMargin: 600 };
    this.rt = {
      host,
      intake: new Intake(host.admission),
      metrics: RouterMetrics.in(host.registry),
      timings: { ...DEFAULT_TIMINGS, ...timings },
      settings: this.settings,
      log: host.log,
    };
  }

  get log(): Logger {
    return this.rt.log;
  }

  /** Names of the running streams (tests, the summary line). */
  get streamNames(): string[] {
    return [...this.streams.keys()];
  }

  /** Runs `config`: starts what is new, stops what is gone, adjusts what changed. */
  apply(config: RouterConfig): Promise<void> {
    this.applying = this.applying.then(() => this.reconcile(config));
    return this.applying;
  }

  /**
   * Runs the file's configuration and follows its changes (every `reloadMs`). The first read must
   * succeed (RouterConfigError otherwise); a later bad version is logged and the running one stays.
   */
  async runFile(file: string): Promise<void> {
    const text = await readConfigText(file);
    const config = parseRouterConfig(text, file);
    this.lastText = text;
    await this.apply(config);
    this.watcher = setInterval(() => void this.reload(file), this.rt.timings.reloadMs);
    this.watcher.unref();
  }

  /** Reads the file again and applies it if it changed (also on SIGHUP). */
  async reload(file: string): Promise<void> {
    if (this.stopped) return;
    let text: string;
    try {
      text = await readConfigText(file);
    } catch (err) {
      if (this.lastText !== undefined) this.log.error({ err: (err as Error).message }, 'router: config not reloaded; the running configuration stays');
      this.lastText = undefined; // read it again once it is back
      return;
    }
    if (text === this.lastText) return;
    this.lastText = text;
    let config: RouterConfig;
    try {
      config = parseRouterConfig(text, file);
    } catch (err) {
      if (!(err instanceof RouterConfigError)) throw err;
      this.log.error({ err: err.message }, 'router: config not reloaded (it has an error); the running configuration stays');
      return;
    }
    this.log.info({ file }, 'router: config changed; applying it');
    await this.apply(config);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.watcher);
    await this.applying;
    await Promise.all([...this.streams.values()].map((s) => s.stop()));
    this.streams.clear();
  }

  private async reconcile(config: RouterConfig): Promise<void> {
    if (this.stopped) return;
    const { settings } = this;
    if (settings.verbose !== config.verbose) this.log.info({ verbose: config.verbose }, 'router: verbose');
    settings.connectionTimeout = config.connectionTimeout;
    settings.verbose = config.verbose;
    settings.catchUpMargin = config.catchUpMargin;
    const wanted = new Map(config.streams.map((s) => [s.name, s]));
    const work: Array<Promise<void>> = [];
    for (const [name, stream] of this.streams) {
      if (wanted.has(name)) continue;
      this.streams.delete(name);
      this.log.info({ stream: name }, 'router: stream removed');
      work.push(stream.stop());
    }
    for (const next of config.streams) {
      const running = this.streams.get(next.name);
      if (!running) {
        this.log.info({ stream: next.name, dir: next.dir, urls: next.urls.length }, 'router: stream started');
        this.streams.set(next.name, new Stream(next, this.rt).start());
      } else if (needsReconnect(running.config, next)) {
        this.log.info({ stream: next.name }, 'router: stream dir or filter changed; reconnecting it');
        this.streams.set(next.name, new Stream(next, this.rt));
        work.push(running.stop().then(() => void this.streams.get(next.name)?.start()));
      } else {
        work.push(running.update(next));
      }
    }
    await Promise.all(work);
  }
}

async function readConfigText(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    throw new RouterConfigError(`router config ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}
