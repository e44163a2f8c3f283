// The IPVS and winkernel backends at 10,000 ClusterIP services x 10
// endpoints (node ports would collide: one node has 2,768 of them): operations and render time of the
// first sync, then of one endpoint change. Recorders stand in for the kernel
// (this one has no IPVS, and HNS is Windows-only), so the times are kpng's
// own work: render, plan, print. Prints figures, asserts nothing.
// `bun run bench ipvs`.

import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import type { NodeState, ServiceEndpoints } from "../src/core/brain/state.ts";
import { createIpvsBackend } from "../plugins/ipvs/backend.ts";
import { recorder } from "../test/harness/command-recorder.ts";
import { createWinkernelBackend } from "../plugins/winkernel/backend.ts";
import { hnsRecorder } from "../plugins/winkernel/recorder.ts";
import { plan, v4 } from "../test/fixtures/addresses.ts";
import { endpoint, entry, nodeState, service } from "../test/ipvs/services.ts";

const services = 10_000;
const endpointsPer = 10;
const ms = (t0: number) => `${(performance.now() - t0).toFixed(1)} ms`;

// 4,096 cluster IPs in the plan: past that, services share an address on another port.
const clusterIP = (i: number) => v4.clusterIP(i % 4096);
// 65,536 pod addresses; endpoint k of the run gets one (they wrap, as pods are reused).
const podIP = (k: number) => v4.pod((k >> 8) & 255, k & 255);

function svc(i: number, extra = 0): [string, ServiceEndpoints] {
  const eps = Object.fromEntries(
    Array.from({ length: endpointsPer + extra }, (_, j) => {
      const k = i * endpointsPer + j;
      return [`p${j}`, endpoint({ ips: [podIP(k)], local: k % 4 === 0 })];
    }),
  );
  return entry(
    service({
      name: `svc-${i}`,
      clusterIPs: [clusterIP(i)],
      ports: [{ name: "http", port: 80 + Math.floor(i / 4096), targetPort: 8080 }],
    }),
    eps,
  );
}

const quiet = createLogger("bench", { level: "error" });
const config = defaultConfig({ nodeName: "node-0", nodeIPs: [v4.node(0)], clusterCIDRs: [plan.v4.clusterCIDR] });

async function ipvs(state: NodeState) {
  const rec = recorder();
  const backend = createIpvsBackend({ config, log: quiet, out: () => {} }, { executor: rec, drainIntervalMs: 0 });
  let t0 = performance.now();
  await backend.apply(state, null);
  const bytes = rec.commands.reduce((n, c) => n + (c.stdin?.length ?? 0), 0);
  console.log(
    `ipvs first sync:       ${ms(t0)}  ${backend.last.operations} operations in ${backend.last.commands} commands (${(bytes / 1e6).toFixed(1)} MB of input)`,
  );
  const changed = svc(5000, 1); // one more endpoint
  const next: NodeState = { ...state, rev: state.rev + 1, services: new Map(state.services).set(changed[0], changed[1]) };
  rec.clear();
  t0 = performance.now();
  await backend.apply(next, new Set([changed[0]]));
  console.log(`ipvs one endpoint:     ${ms(t0)}  ${backend.last.operations} operations in ${backend.last.commands} command(s)`);
}

async function winkernel(state: NodeState) {
  const hns = hnsRecorder();
  const backend = createWinkernelBackend({ config, log: quiet, out: () => {} }, { hns });
  for (let k = 0; k < services * endpointsPer; k += 4) hns.addLocalEndpoint(podIP(k)); // what the CNI made
  let t0 = performance.now();
  for (const { service: s, endpoints } of state.services.values()) {
    backend.setService(s);
    for (const [k, ep] of endpoints) backend.setEndpoint(s.Namespace, s.Name, k, ep);
  }
  await backend.sync();
  console.log(`winkernel first sync:  ${ms(t0)}  ${backend.last.calls} HNS calls`);
  const changed = svc(5000, 1);
  t0 = performance.now();
  backend.setEndpoint("default", "svc-5000", `p${endpointsPer}`, changed[1].endpoints.get(`p${endpointsPer}`)!);
  await backend.sync();
  console.log(`winkernel one endpoint: ${ms(t0)}  ${backend.last.calls} HNS calls`);
}

export default async function () {
  const state = nodeState(
    1,
    Array.from({ length: services }, (_, i) => svc(i)),
  );
  console.log(`${services} services x ${endpointsPer} endpoints (ClusterIP); recorders, no kernel`);
  await ipvs(state);
  await winkernel(state);
}
