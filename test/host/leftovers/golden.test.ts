// The planner's unit tests (plan.test.ts) read kube-proxy's iptables mode from
// golden/kube-proxy-iptables.save: what the real kube-proxy 1.36.2 wrote
// (iptables-save, nft flavour, IPv4) serving the cluster of node.ts
// (`default/web`: cluster IP, node port 30080, two endpoints; and the API
// server's own `default/kubernetes`, without endpoints) on the address plan's
// node and pods. This test captures it again from a real run and compares, so
// the golden follows kube-proxy: `UPDATE_GOLDEN=1` rewrites it (review the diff).

import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { LOADED_WAIT_MS, tempDir } from "../../harness/kpng-process.ts";
import { haveK8s, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { startKubeProxy } from "../../harness/kube-proxy.ts";
import { createTopology, type Topology } from "../../harness/netns.ts";
import { GOLDEN_IPTABLES, kubeProxyIptables, normalizeSave } from "./kube-proxy-rules.ts";
import { clusterObjects, kubeProxyServes, NODE, webService } from "./node.ts";

const real = haveK8s("kube-proxy's rules golden");

describe.skipIf(!real)("golden/kube-proxy-iptables.save", () => {
  const dir = tempDir("kpng-kp-golden-");
  let topo: Topology | undefined;
  afterAll(async () => {
    await topo?.destroy();
    dir.remove();
  });

  test("is what the real kube-proxy writes in iptables mode for node.ts's cluster", async () => {
    topo = await createTopology({ pods: 2, prefix: "kpg" });
    const api = await sharedApiServer();
    await api.apply(...clusterObjects(topo));
    const unreach = await api.reach(topo.node.ns);
    const kp = await startKubeProxy({ api, ns: topo.node.ns, mode: "iptables", nodeName: NODE, dir: dir.create(), iptables: "nft" });
    let captured: string;
    try {
      const s = webService(topo);
      await kp.waitForRules((r) => kubeProxyServes("iptables", r, [s.clusterIP]) && r.includes(`--dport ${s.nodePort} -j KUBE-EXT-`));
      // its first IPv4 sync is in whole (one restore), before the IPv6 one starts
      const end = Date.now() + LOADED_WAIT_MS;
      while (!kp.log.some((l) => l.includes('"SyncProxyRules complete" ipFamily="IPv4"')) && Date.now() < end) await Bun.sleep(100);
      captured = normalizeSave(await topo.exec(topo.node.ns, ["iptables-nft-save"]));
    } finally {
      await kp.stop();
      await unreach();
    }
    if (process.env.UPDATE_GOLDEN === "1" || !existsSync(GOLDEN_IPTABLES)) writeFileSync(GOLDEN_IPTABLES, captured);
    expect(captured).toBe(kubeProxyIptables());
    // three loaded waits: the API server's start, kube-proxy's rules, its log line (90 s at load 28-46)
  }, 210_000);
});
