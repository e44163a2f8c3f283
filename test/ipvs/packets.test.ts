// Real packets through the IPVS mode's filter rules (this kernel has no IPVS,
// so nothing is load-balanced): service IPs on the node's loopback stand in
// for kube-ipvs0 and a server on the node stands in for IPVS answering. What
// is checked for truth is what the rules decide before IPVS would see the
// packet: REJECT, DROP, and loadBalancerSourceRanges.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { defaultConfig } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Executor } from "../../src/host/backend.ts";
import { createIpvsBackend } from "../../plugins/ipvs/backend.ts";
import { recorder } from "../harness/command-recorder.ts";
import { type Topology, createTopology } from "../harness/netns.ts";
import { plan, v4 } from "../fixtures/addresses.ts";
import { endpoint, entry, nodeState, service } from "./services.ts";

let topo: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 1, prefix: "kpiv" });
});
afterAll(async () => {
  // destroy() stops pod servers only: the node's own one is ours to stop.
  await topo?.stopServer(nodeServer());
  await topo?.destroy();
});
const nodeServer = () => ({ ...topo.node, name: "node" });

const C1 = v4.clusterIP(1);
const C2 = v4.clusterIP(2);
const E1 = v4.external(1);
const E2 = v4.external(2);
const E3 = v4.external(3);
const remote = { b: endpoint({ ips: [v4.pod(2, 5)] }) };
const port = [{ name: "http", port: 80, targetPort: 8080 }];

describe("ipvs filter rules on real packets", () => {
  test("REJECT without endpoints, DROP under a Local policy, source ranges enforced", async () => {
    const nodeExec = topo.executor(topo.node.ns);
    const rec = recorder();
    // ipset and iptables for real on the node; IPVS and link changes recorded.
    const executor: Executor = {
      run: (argv, stdin) => (argv[0] === "ipvsadm" || argv[0] === "ip" ? rec.run(argv, stdin) : nodeExec.run(argv, stdin)),
    };
    for (const ip of [C1, C2, E1, E2, E3]) await topo.exec(topo.node.ns, ["ip", "addr", "add", `${ip}/32`, "dev", "lo"]);
    await topo.serve(nodeServer(), { tcp: [80] });

    const config = defaultConfig({ nodeName: "node0", nodeIPs: [topo.node.v4], clusterCIDRs: [plan.v4.clusterCIDR] });
    const backend = createIpvsBackend({ config, log: memoryLogger(), out: () => {} }, { executor, drainIntervalMs: 0 });
    await backend.apply(
      nodeState(1, [
        entry(service({ name: "no-endpoints", clusterIPs: [C1], ports: port })),
        entry(service({ name: "open", clusterIPs: [C2], ports: port }), remote),
        entry(service({ name: "local", lbIPs: [E1], ports: port, eTPLocal: true }), {
          b: endpoint({ ips: [v4.pod(2, 5)], external: false }),
        }),
        entry(service({ name: "allowed", lbIPs: [E2], ports: port, sourceRanges: [plan.v4.clientCIDR] }), remote),
        entry(service({ name: "denied", lbIPs: [E3], ports: port, sourceRanges: [plan.v4.nodeCIDR] }), remote),
      ]),
      null,
    );

    const got = await topo.probeMany(
      topo.client.ns,
      [C1, C2, E1, E2, E3].map((ip) => ({ ip, port: 80, timeout: 1 })),
    );
    const summary = got.map((g) => (g.ok ? "ok" : g.error));
    expect(summary).toEqual([
      "refused", // no endpoints, Cluster policy: REJECT although something listens
      "ok", // served: nothing in the way
      "timeout", // eTP=Local without a local endpoint: DROP
      "ok", // source inside loadBalancerSourceRanges
      "timeout", // source outside them: DROP
    ]);
  });
});
