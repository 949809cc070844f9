// The relay's one HTTP router: every plain HTTP request on the relay's port (WebSocket upgrades go
// to server.ts) is answered by the route for its path. Routes are added by the features that own
// them, each handler in its own file (NIP-11 in nip11.ts; /metrics, /health and the management API
// come next). A path with no route of its own is the relay's endpoint, NIP-11 (NIP-01: extra path
// segments must not change behaviour, and relays behind a proxy are often served under a prefix).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../../log.js';

export type HttpHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export interface Route {
  /** The exact path (without query string); undefined for the relay's endpoint (any other path). */
  path?: string;
  /** Methods answered; anything else gets 405 with an Allow header. */
  methods: readonly string[];
  handle: HttpHandler;
  /** Headers sent with that 405 (CORS, for routes browsers call). */
  headers?: Record<string, string>;
}

/** The path part of a request target: "/metrics?x=1" → "/metrics". */
export function pathOf(req: IncomingMessage): string {
  const target = req.url ?? '/';
  const q = target.indexOf('?');
  return q < 0 ? target : target.slice(0, q);
}

export class HttpRouter {
  private readonly byPath = new Map<string, Route>();
  private endpoint: Route | undefined;

  constructor(private readonly log: Logger) {}

  add(route: Route): this {
    if (route.path === undefined) this.endpoint = route;
    else this.byPath.set(route.path, route);
    return this;
  }

  /** The node:http request listener. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const route = this.byPath.get(pathOf(req)) ?? this.endpoint;
    if (!route) {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end('not found\n');
      return;
    }
    if (!route.methods.includes(req.method ?? '')) {
      res.writeHead(405, { ...route.headers, Allow: route.methods.join(', ') }).end();
      return;
    }
    Promise.resolve()
      .then(() => route.handle(req, res))
      .catch((err: unknown) => {
        this.log.error({ err: (err as Error).message, stack: (err as Error).stack, path: pathOf(req) }, 'HTTP handler failed');
        if (!res.headersSent) res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end();
      });
  };
}
