import type { Registry } from 'prom-client';
import { loadRouterConfig, RouterConfigError } from '../../ops/router/config.js';
import { listPositions } from '../../ops/router/positions.js';
import { Router } from '../../ops/router/router.js';
import { openStandaloneHost } from '../../ops/router/standalone.js';
import type { Command } from '../command.js';
import { formatCount, intOption, openStore, parseOptions, UsageError } from './shared.js';

/** "5000-10000" → [5000, 10000] (ms). */
function rangeOption(value: string | undefined, name: string, fallback: [number, number]): [number, number] {
  if (value === undefined) return fallback;
  const m = /^(\d+)(?:-(\d+))?$/.exec(value);
  const range: [number, number] | undefined = m ? [Number(m[1]), Number(m[2] ?? m[1])] : undefined;
  if (!range || range[0] > range[1]) throw new UsageError(`--${name} takes milliseconds or a range MIN-MAX (got "${value}")`);
  return range;
}

/** One line of totals from the router's metrics: what moved, what is connected, the oldest position. */
async function summary(registry: Registry): Promise<Record<string, unknown>> {
  const metrics = await registry.getMetricsAsJSON();
  const sum = (name: string, by: string) => {
    const totals: Record<string, number> = {};
    for (const v of metrics.find((m) => m.name === name)?.values ?? []) {
      const key = String(v.labels[by]);
      totals[key] = (totals[key] ?? 0) + v.value;
    }
    return totals;
  };
  const values = (name: string) => metrics.find((m) => m.name === name)?.values ?? [];
  const connected = values('pgrelay_router_connected');
  return {
    connected: `${connected.filter((v) => v.value === 1).length}/${connected.length}`,
    down: sum('pgrelay_router_events_down_total', 'outcome'),
    up: sum('pgrelay_router_events_up_total', 'outcome'),
    oldestPositionSeconds: Math.round(Math.max(0, ...values('pgrelay_router_lag_seconds').map((v) => v.value))),
  };
}

export const routerCommand: Command = {
  name: 'router',
  help: `usage: npm run cli -- router <config-file> [options]

strfry's router (strfry docs/router.md) on this relay's database: streams of events down from other
relays (REQ with the stream's filter, each event through pluginDown, the relay's write rules, the
signature check and WRITE_POLICY_PLUGIN, then stored like any event: fanned out to the relay's
subscribers, webhooks and other processes) and up to them (every event committed here that the
filter matches and pluginUp passes, sent with EVENT and acknowledged with OK; never sent back to the
remote it came from).

The config file is strfry's, as is (taoCONFIG: key = value, name { ... } sections, arrays with or
without commas, # comments), or the same in JSON:
  connectionTimeout = 20
  streams {
      friends { dir = "down"  urls = [ "wss://nos.lol" ]  pluginDown = "/etc/pgrelay/spam-filter.js" }
      directory { dir = "up"  filter = { "kinds": [0, 3] }  urls = [ "ws://directory.example.com" ] }
  }
A bad file is refused with its line and column (exit code 2). While running, the file is read again
when it changes (or on SIGHUP): streams that did not change keep their connections; a file with an
error is logged and the running configuration stays.

No gaps: each stream keeps a position per remote and direction in the database. After a disconnect,
the remote's restart or this command's restart, it catches up first (NIP-77 negentropy when the
remote supports it, else REQ since) from the position minus catchUpMargin (600 s by default, a
top-level field strfry ignores), then goes live. up also sends whatever was committed here since its
position, however old its created_at. The relay runs the same streams itself with ROUTER_CONFIG.

options:
  --positions              print the stored positions and exit
  --reconnect-delay MS     wait before reconnecting, drawn from MIN-MAX ms (default 5000-10000)
  --checkpoint-interval MS how often positions are recorded (default 5000)
  --summary-interval S     log a line of totals this often (default 60; 0: never)`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(
      args,
      {
        positions: { type: 'boolean', default: false },
        'reconnect-delay': { type: 'string' },
        'checkpoint-interval': { type: 'string' },
        'summary-interval': { type: 'string' },
      },
      true,
    );
    if (positionals.length !== 1) throw new UsageError('router takes one argument: the path of its config file');
    const file = positionals[0];
    const reconnectMs = rangeOption(values['reconnect-delay'], 'reconnect-delay', [5000, 10_000]);
    const checkpointMs = intOption(values['checkpoint-interval'], 'checkpoint-interval', 10, 5000);
    const summaryMs = intOption(values['summary-interval'], 'summary-interval', 0, 60) * 1000;
    try {
      loadRouterConfig(file);
    } catch (err) {
      if (!(err instanceof RouterConfigError)) throw err;
      console.error(err.message);
      return 2;
    }

    const db = await openStore(config, log);
    if (values.positions) {
      try {
        const rows = await listPositions(db.pool);
        if (rows.length === 0) console.log('no positions yet');
        for (const r of rows)
          console.log(
            `${r.stream}  ${r.url}  ${r.direction.padEnd(4)}  through ${new Date(r.through * 1000).toISOString()}${r.txid === null ? '' : `  txid ${r.txid}`}  (recorded ${r.updatedAt.toISOString()})`,
          );
        return 0;
      } finally {
        await db.close();
      }
    }

    const host = await openStandaloneHost(config, db, log);
    const router = new Router(host, { reconnectMs, checkpointMs });
    let summaryTimer: NodeJS.Timeout | undefined;
    const onHup = () => void router.reload(file);
    try {
      await router.runFile(file);
      log.info({ file, streams: router.streamNames }, 'router running');
      process.stderr.write(`router: ${formatCount(router.streamNames.length)} stream(s) running from ${file}; Ctrl-C to stop\n`);
      process.on('SIGHUP', onHup);
      if (summaryMs > 0) summaryTimer = setInterval(() => void summary(host.registry).then((s) => log.info(s, 'router summary')), summaryMs);
      // Until SIGINT or SIGTERM; a second one quits at once.
      let stopping = false;
      await new Promise<void>((resolve) => {
        const onSignal = (signal: NodeJS.Signals) => {
          if (stopping) process.exit(130);
          stopping = true;
          log.info({ signal }, 'router: stopping');
          resolve();
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
      log.info(await summary(host.registry), 'router summary');
      return 0;
    } catch (err) {
      if (!(err instanceof RouterConfigError)) throw err;
      console.error(err.message);
      return 2;
    } finally {
      clearInterval(summaryTimer);
      process.off('SIGHUP', onHup);
      await router.stop();
      await host.close();
      await db.close();
    }
  },
};
