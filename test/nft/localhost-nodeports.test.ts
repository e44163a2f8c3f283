// nftables mode and localhost node ports, as upstream's nftables mode: never
// served, whatever iptables.localhostNodePorts says (the setting is iptables
// mode's), route_localnet left alone, and a loopback address in
// nodePortAddresses named in kube-proxy's error line.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createNftBackend } from "../../plugins/nft/index.ts";
import type { Config } from "../../src/core/config/config.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { v4 } from "../fixtures/addresses.ts";
import { context, ep, nodeConfig, nodeState, entry, recorder, svc } from "./fixtures.ts";

const NODE_PORT = 30081;
const on = (o: Partial<Config> = {}) => nodeConfig({ iptables: { localhostNodePorts: true }, ...o });

describe("nft: localhost node ports", () => {
  test("a loopback address in nodePortAddresses: kube-proxy's error line, once per address; others say nothing", async () => {
    const ctx = context(on({ nodePortAddresses: ["127.0.0.0/8", "::1/128", "198.18.0.0/24"], dryRun: true }));
    await createNftBackend(ctx, { exec: recorder().exec }).setup();
    const errors = ctx.lines.filter((l) => l.includes("localhost NodePorts are not supported"));
    expect(errors).toHaveLength(2);
    expect(errors.join("\n")).toContain("127.0.0.0/8");
    expect(errors.join("\n")).toContain("::1/128");
    const quiet = context(on({ dryRun: true }));
    await createNftBackend(quiet, { exec: recorder().exec }).setup();
    expect(quiet.lines.filter((l) => l.includes("localhost"))).toEqual([]);
  });

  describe("real packets", () => {
    let topo: Topology;
    beforeAll(async () => {
      topo = await createTopology({ pods: 1, prefix: "kpnl" });
      await topo.serve(topo.pods[0]!, { tcp: [8080] });
    });
    afterAll(() => topo?.destroy());

    test("localhostNodePorts true: the node IP answers, 127.0.0.1 does not, route_localnet stays 0", async () => {
      const backend = createNftBackend(context(on()), { exec: topo.executor(topo.node.ns) });
      await backend.setup();
      const service = svc({
        name: "np",
        clusterIPs: [v4.clusterIP(51)],
        ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: NODE_PORT }],
      });
      await backend.apply(nodeState([entry(service, { a: ep({ ips: [topo.pods[0]!.v4], ports: { http: 8080 } }) })]), null);
      const [local, viaNode] = await topo.probeMany(topo.node.ns, [
        { ip: "127.0.0.1", port: NODE_PORT, timeout: 1 },
        { ip: topo.node.v4, port: NODE_PORT, timeout: 2 },
      ]);
      expect(viaNode).toMatchObject({ ok: true, who: "pod0" });
      expect(local).toMatchObject({ ok: false });
      expect((await topo.exec(topo.node.ns, ["sysctl", "-n", "net.ipv4.conf.all.route_localnet"])).trim()).toBe("0");
      await backend.close?.();
    });
  });
});
