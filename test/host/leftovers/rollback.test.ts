// Rollback: the reverse of migrate.test.ts. A node runs kpng (as a DaemonSet
// runs it: `--kubeconfig --node-name --backend`) against the real API server,
// serving two Services; kpng's pod goes (SIGTERM: its rules stay, as
// kube-proxy's do); the operator's rollback step runs — `kpng --cleanup`, as
// an init container of kube-proxy's DaemonSet runs it, with no other flag;
// then the real kube-proxy 1.36.2 starts and must serve every Service (real
// packets from a client namespace to the cluster IPs and the node port), with
// nothing of kpng's left on the node.
//
// And what happens when the operator forgets the cleanup step, asserted as it
// is (the doc says it): kpng's stale rules stay in the kernel beside
// kube-proxy's, and kube-proxy's go first for every Service it knows —
// - nftables mode: `table ip kube-proxy` and `table ip kpng` both DNAT at
//   priority dstnat (-100); of hooks with one priority the kernel runs the one
//   registered last first (nf_hook_entries_grow inserts a new hook before its
//   equals), so kube-proxy's, created after kpng's, translates first;
// - iptables mode: kube-proxy inserts its KUBE-SERVICES jumps at the head of
//   PREROUTING and OUTPUT, in front of kpng's —
// so traffic to a Service kube-proxy serves follows kube-proxy, and an
// endpoint removed after the rollback gets nothing. But a cluster IP
// kube-proxy has no rule for falls through to kpng's stale rules: a Service
// deleted after the rollback still answers, from its old endpoints, until
// someone runs `kpng --cleanup` (or the node reboots). Run late, that cleanup
// removes kube-proxy's rules too (it cleans every mode), and kube-proxy in
// nftables mode does not put them back by itself: the remedy is the cleanup,
// then kube-proxy's pod on that node restarted.
//
// kube-proxy's own `--cleanup` is no substitute: it knows nothing of kpng's
// table and KPNG- chains, and leaves them (the last test here).

import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../../fixtures/addresses.ts";
import { slice, svc } from "../../fixtures/k8s.ts";
import { startKpng, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer, requireK8s, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { type KubeProxy, type ProxyMode, startKubeProxy } from "../../harness/kube-proxy.ts";
import { createTopology, type Probe, type Topology } from "../../harness/netns.ts";
import { clusterObjects, holdings, kpngHeld, kubeProxyHeld, kubeProxyServes, NODE, webService, writeCluster } from "./node.ts";

/** the second Service: `default/db`, a ClusterIP on pod2 only */
const DB_IP = v4.clusterIP(11);
const dbObjects = (topo: Topology) => [
  svc({ name: "db", clusterIPs: [DB_IP], ports: [{ name: "pg", protocol: "TCP", port: 5432, targetPort: 8080 }] }),
  slice({
    service: "db",
    ports: [{ name: "pg", protocol: "TCP", port: 8080 }],
    endpoints: [{ ip: topo.pods[2].v4, node: NODE, pod: topo.pods[2].name }],
  }),
];

/** kube-proxy's rules send db's cluster IP and port to its Service */
const servesDb = (mode: Case["mode"], rules: string) =>
  mode === "iptables"
    ? new RegExp(`-A KUBE-SERVICES -d ${DB_IP}/32 -p tcp .*--dport 5432 -j KUBE-SVC-`).test(rules)
    : rules.includes(`${DB_IP} . tcp . 5432 : goto service-`);

interface Case {
  backend: "nft" | "iptables";
  mode: Exclude<ProxyMode, "ipvs">;
}

const cases: Case[] = [
  { backend: "nft", mode: "nftables" },
  { backend: "iptables", mode: "iptables" },
];

interface Node {
  topo: Topology;
  api: KubeApiServer;
  dir: string;
  probes: { web: Probe; webNodePort: Probe; db: Probe };
}

const real = haveK8s("rollback from kpng to the real kube-proxy");

/** Who answers each probe, `n` rounds: a map from the answer ("pod1", "timeout", ...) to its count. */
async function answers(topo: Topology, probe: Probe, n: number): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const r = await topo.probe(topo.client.ns, { ...probe, timeout: probe.timeout ?? 1 });
    const k = r.ok ? r.who : r.error;
    out[k] = (out[k] ?? 0) + 1;
  }
  return out;
}

/** polls `probe` until `ok` holds for one answer (bounded); the last answer */
async function until(topo: Topology, probe: Probe, ok: (who: string) => boolean, timeoutMs = 60_000): Promise<string> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await topo.probe(topo.client.ns, { ...probe, timeout: 0.5 });
    const who = r.ok ? r.who : r.error;
    if (ok(who) || Date.now() > end) return who;
    await Bun.sleep(200);
  }
}

describe.skipIf(!real).each(cases)("kpng --backend $backend -> kube-proxy in $mode mode", (c) => {
  const dir = tempDir("kpng-rollback-");
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const f of cleanups.splice(0).reverse()) await f().catch(() => {});
    dir.remove();
  });

  /** a node where kpng has served both Services (probed through kpng's rules), then stopped as its pod is deleted */
  async function nodeAfterKpng(prefix: string): Promise<Node> {
    const topo = await createTopology({ pods: 3, prefix });
    cleanups.push(() => topo.destroy());
    dir.create();
    const api = await sharedApiServer();
    for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
    await api.apply(...clusterObjects(topo), ...dbObjects(topo));
    cleanups.push(await api.reach(topo.node.ns));
    const s = webService(topo);
    const probes = {
      web: { ip: s.clusterIP, port: 80 },
      webNodePort: { ip: s.nodeIP, port: s.nodePort },
      db: { ip: DB_IP, port: 5432 },
    };
    const kubeconfig = api.writeKubeconfig(join(dir.path, "kpng.kubeconfig"), { server: "https://127.0.0.1:6443" });
    const kpng: KpngProcess = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", c.backend], {
      wrap: ["ip", "netns", "exec", topo.node.ns],
    });
    cleanups.push(() => kpng.stop("SIGKILL"));
    await kpng.waitFor(/ INFO kpng: synced /, 60_000);
    const [web, nodePort, db] = await topo.probeMany(topo.client.ns, [probes.web, probes.webNodePort, probes.db]);
    expect(web.ok && web.who).toMatch(/^pod[01]$/);
    expect(nodePort.ok && nodePort.who).toMatch(/^pod[01]$/);
    expect(db.ok && db.who).toBe("pod2");
    // kpng's pod is deleted: SIGTERM, and its rules stay (as kube-proxy's do)
    expect(await kpng.stop("SIGTERM")).toBe(0);
    expect(kpngHeld(await holdings(topo)).length).toBeGreaterThan(0);
    return { topo, api, dir: dir.path, probes };
  }

  /** kube-proxy, once its rules serve web (and db, unless it was deleted) */
  async function kubeProxy(n: Node, db = true): Promise<KubeProxy> {
    const kp = await startKubeProxy({ api: n.api, ns: n.topo.node.ns, mode: c.mode, nodeName: NODE, dir: n.dir, iptables: "nft" });
    cleanups.push(() => kp.stop());
    await kp.waitForRules((r) => kubeProxyServes(c.mode, r, [n.probes.web.ip]) && (!db || servesDb(c.mode, r)));
    return kp;
  }

  test("kpng --cleanup, then kube-proxy serves every Service through its own rules, nothing of kpng's left", async () => {
    const n = await nodeAfterKpng("kpr");
    const { topo } = n;

    // the rollback step, as kube-proxy's DaemonSet's init container runs it
    const cleanup = startKpng(["--cleanup"], { wrap: ["ip", "netns", "exec", topo.node.ns] });
    expect(await cleanup.proc.exited).toBe(0);
    // kube-proxy had nothing here (kpng removed its rules when it took over): no word about it
    expect(cleanup.stderr.some((l) => l.includes("kube-proxy's rules were removed too"))).toBe(false);
    expect(kpngHeld(await holdings(topo))).toEqual([]);
    // nothing answers between the cleanup and kube-proxy's first sync
    const gap = await topo.probe(topo.client.ns, { ...n.probes.web, timeout: 0.5 });
    expect(gap.ok).toBe(false);

    await kubeProxy(n);
    for (const [name, p] of Object.entries(n.probes)) {
      // named, so that a failure says which Service answered what
      for (const who of Object.keys(await answers(topo, p, 6)))
        expect(`${name} ${who}`).toMatch(name === "db" ? /^db pod2$/ : /^\w+ pod[01]$/);
    }
    const h = await holdings(topo);
    expect(kpngHeld(h)).toEqual([]);
    expect(kubeProxyHeld(h).length).toBeGreaterThan(0);

    // kube-proxy alone follows the cluster: pod0 leaves web's endpoints, db is deleted
    await n.api.apply(slice({ service: "web", endpoints: [{ ip: topo.pods[1].v4, node: NODE, pod: topo.pods[1].name }] }));
    await n.api.remove("Service", "default", "db");
    expect(await until(topo, n.probes.db, (who) => !/^pod/.test(who))).not.toMatch(/^pod/);
    const web = await answers(topo, n.probes.web, 10);
    expect(Object.keys(web)).toEqual(["pod1"]);
  }, 180_000);

  test("without kpng --cleanup: kpng's stale rules stay and keep steering traffic", async () => {
    const n = await nodeAfterKpng("kpf");
    const { topo } = n;
    const kp = await kubeProxy(n);
    // both proxies' rules on the node: nothing removed kpng's
    const h = await holdings(topo);
    expect(kpngHeld(h).length).toBeGreaterThan(0);
    expect(kubeProxyHeld(h).length).toBeGreaterThan(0);
    // every Service still answers (both rule sets agree so far)
    for (const p of Object.values(n.probes)) expect(Object.keys(await answers(topo, p, 4)).every((w) => /^pod\d$/.test(w))).toBe(true);

    // then the cluster changes: pod0 leaves web's endpoints (its server still answers, to show who routes there), db is deleted
    await n.api.apply(slice({ service: "web", endpoints: [{ ip: topo.pods[1].v4, node: NODE, pod: topo.pods[1].name }] }));
    await n.api.remove("Service", "default", "db");
    // kube-proxy has seen both changes: no rule of its own leads to db or to pod0 any more (iptables-save prints kpng's chains too)
    const own = (r: string) => r.split("\n").filter((l) => !l.includes("KPNG-"));
    await kp.waitForRules((r) => !own(r).some((l) => l.includes(DB_IP) || l.includes(`${topo.pods[0].v4}:8080`)));

    // kube-proxy's rules go first for the Services it knows: the removed endpoint gets nothing
    expect(await answers(topo, n.probes.web, 24)).toEqual({ pod1: 24 });
    // the deleted Service still answers, from kpng's stale rules
    expect(await answers(topo, n.probes.db, 4)).toEqual({ pod2: 4 });
    // The remedy: `kpng --cleanup` run late removes kpng's rules, and kube-proxy's with them (it
    // cleans every mode); kube-proxy does not always notice (iptables mode put its rules back after
    // its canary check, in about 10 s here; nftables mode had not after 120 s), so it is restarted.
    const cleanup = startKpng(["--cleanup"], { wrap: ["ip", "netns", "exec", topo.node.ns] });
    expect(await cleanup.proc.exited).toBe(0);
    // it says so, and what to do
    expect(await cleanup.waitFor(/WARN .*kube-proxy's rules were removed too/)).toContain("restart it");
    expect(kpngHeld(await holdings(topo))).toEqual([]);
    await kp.stop();
    await kubeProxy(n, false);
    expect(await answers(topo, n.probes.web, 10)).toEqual({ pod1: 10 });
    expect(Object.keys(await answers(topo, n.probes.db, 2)).some((w) => /^pod/.test(w))).toBe(false);
    expect(kpngHeld(await holdings(topo))).toEqual([]);
  }, 240_000);
});

describe.skipIf(!real)("kube-proxy's own cleanup", () => {
  const dir = tempDir("kpng-rollback-kp-cleanup-");
  let topo: Topology | undefined;
  afterAll(async () => {
    await topo?.destroy();
    dir.remove();
  });

  test("kube-proxy --cleanup leaves kpng's rules of both backends (why the rollback step is kpng --cleanup)", async () => {
    topo = await createTopology({ pods: 2, prefix: "kpk" });
    const input = writeCluster(topo, dir.create());
    const t = topo;
    for (const backend of ["nft", "iptables"]) {
      const p = startKpng(["--input", input, "--node-name", NODE, "--backend", backend, "--once"], {
        wrap: ["ip", "netns", "exec", t.node.ns],
      });
      expect(await p.proc.exited).toBe(0);
    }
    const before = kpngHeld(await holdings(t));
    expect(before.length).toBeGreaterThan(0);
    const kp = Bun.spawn(["ip", "netns", "exec", t.node.ns, requireK8s().kubeProxy, "--cleanup"], { stdout: "ignore", stderr: "ignore" });
    expect(await kp.exited).toBe(0);
    expect(kpngHeld(await holdings(t))).toEqual(before);
  }, 60_000);
});
