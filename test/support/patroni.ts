// The Patroni + etcd cluster on loopback for failover tests. The cluster itself is in
// bench/lib/patroni-cluster.ts, which the failover bench shares (the bench runs compiled, from
// bench/ and src/ only).
import { skipWithout } from './executables.js';
import { missingHaPeers } from '../../bench/lib/patroni-cluster.js';

export { startPatroniCluster, PATRONI_TIMING, type PatroniCluster, type ClusterMember, type HaNode } from '../../bench/lib/patroni-cluster.js';

/** True (with a warning saying what is missing and how to install it) when this machine cannot run the cluster; under REQUIRE_PEERS=1 it throws instead. */
export function skipWithoutPatroni(): boolean {
  const missing = missingHaPeers();
  return skipWithout(missing.length === 0, `a Patroni cluster (skipped: it needs ${missing.join('; ')})`);
}
