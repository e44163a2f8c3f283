// The iptables suites' view of the shared state builders (test/fixtures/state.ts),
// plus the config and context of node 0 of the namespace topology.

import type { Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Service } from "../../src/core/brain/state.ts";
import type { BackendContext } from "../../src/host/backend.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { node0Config } from "../fixtures/node-config.ts";
import { service, type ServiceSpec } from "../fixtures/state.ts";

export type SvcSpec = ServiceSpec;
export { endpoint as ep, type EndpointSpec as EpSpec } from "../fixtures/state.ts";

/** target ports filled in from the port, as the brain does for a service without one */
export const svc = (s: SvcSpec): Service => service({ ...s, ports: s.ports.map((p) => ({ ...p, targetPort: p.targetPort ?? p.port })) });

/** The node of the namespace topology: node 0, pods in 198.19.0.0/24. */
export const testConfig = node0Config;

export function testContext(config: Config = testConfig()): BackendContext & { printed: string[]; log: ReturnType<typeof memoryLogger> } {
  const printed: string[] = [];
  return { config, log: memoryLogger(), out: (t) => printed.push(t), printed };
}

export { v4, v6 };
