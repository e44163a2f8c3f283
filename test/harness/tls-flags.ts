// Mutual TLS between a brain (`kpng serve`) and its node agents, as the
// tests and benches set it up: the files in one folder, named as
// deploy/global-certs.sh names its own (brain.crt/.key, agent.crt/.key), and
// the flags an operator passes on each side.

import { join } from "node:path";
import { makeClientCert, makeTestCert } from "./api-server.ts";

/**
 * In `dir`: the brain's certificate (IP:127.0.0.1, its own CA), the agents'
 * CA (agents-ca.crt) and node-1's client certificate signed by it (agent.crt).
 */
export function makeMutualTls(dir: string): void {
  makeTestCert(dir, { name: "brain" });
  makeClientCert(dir, makeTestCert(dir, { san: "DNS:kpng-agents", name: "agents-ca" }), "node-1", "agent");
}

/** `kpng serve`'s flags: brain.crt and brain.key in `dir`, its clients' certificates checked against `clientCA` */
export const listenTls = (dir: string, clientCA = join(dir, "agents-ca.crt")): string[] => [
  "--listen-tls-crt",
  join(dir, "brain.crt"),
  "--listen-tls-key",
  join(dir, "brain.key"),
  "--listen-tls-ca",
  clientCA,
];

/** an agent's flags: the brain trusted through `ca`, agent.crt and agent.key in `dir` */
export const agentTls = (dir: string, ca = join(dir, "brain.crt")): string[] => [
  "--tls-ca",
  ca,
  "--tls-crt",
  join(dir, "agent.crt"),
  "--tls-key",
  join(dir, "agent.key"),
];
