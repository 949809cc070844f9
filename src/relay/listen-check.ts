// Is the relay's port free? Checked before anything else starts, so that a second `npm start` (or an
// old relay still running) fails at once with a clear message instead of after starting PostgreSQL.
// The real listen can still fail (another process may take the port in between): that error gets the
// same message (fatal.ts).
import { createServer } from 'node:net';

export function checkPortFree(port: number, host: string): Promise<void> {
  if (port === 0) return Promise.resolve(); // any free port
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen({ port, host, exclusive: true }, () => probe.close(() => resolve()));
  });
}
