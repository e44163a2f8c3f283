// kpng as deployed (issue 10 E): both sources (--input, and --kubeconfig
// against the real kube-apiserver 1.36.2) x both Linux backends, one kpng
// process per combination started with an operator's flags only, serving the
// cluster of cluster.ts. A client outside the node checks every behaviour in
// one probe run, then the faults an operator meets are played against the
// same process: broken edits of the input file, the API server down for
// 10 s (a control plane of the suite's own, so it may stop it), kpng's rules
// flushed or deleted by someone else, kill -9 and restart under a continuous
// probe (issue 10 C), the Node's IP changed (last: it leaves the node on its
// new address). The API-server x nft combination
// runs the compiled dist/kpng (and is restarted from source); file x nft is
// restarted as dist/kpng: a rolling update across builds.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { FIRST_LOAD_SPLIT_ELEMENTS } from "../../plugins/nft/executor.ts";
import { v4 } from "../fixtures/addresses.ts";
import { compiledKpng } from "../fixtures/compiled.ts";
import { asSent, slice } from "../fixtures/k8s.ts";
import type { Probe } from "../harness/netns.ts";
import { canonicalRuleset } from "../nft/ruleset.ts";
import { checks, ips, NODE, nodeObject, nodePorts, runChecks, settledChecks, wanted } from "./cluster.ts";
import { haveK8s } from "../harness/kube-apiserver.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";
import {
  continuousProbe,
  deploy,
  monitorRuleset,
  putInEtcd,
  tablesMissingBetweenTransactions,
  type BackendName,
  type Deployed,
  type SourceKind,
} from "./rig.ts";

/** someone else removes kpng's rules: what, the command run in the node namespace, and how soon kpng must have restored them */
interface Removal {
  what: string;
  argv: string[];
  withinMs: number;
}
// nft notices through the kernel's events (netlink); iptables checks a canary chain every 5 s,
// and /healthz says 200 until it noticed.
const flushRuleset = (withinMs: number): Removal => ({
  what: "the ruleset flushed (a firewall reload)",
  argv: ["nft", "flush", "ruleset"],
  withinMs,
});
/** how long a repair may take before a test fails: the figures of docs/operators.md are targets, measured by `bun run bench nft-repair` */
const LOADED_BOUND_MS = LOADED_WAIT_MS;
/**
 * How long kpng may take to report a broken edit of the input file. A text
 * cut mid-write is parsed a second time by the `yaml` library to name the
 * line of the error (src/core/sources/file.ts): 4.4 s of CPU for the 3 MB
 * half of the 2,100-service file, 66 s of wall time at load 25. Three loaded
 * waits, so that a hang still fails.
 */
const BROKEN_EDIT_BOUND_MS = 3 * LOADED_WAIT_MS;
const deleteTable: Removal = { what: "kpng's table deleted", argv: ["nft", "delete", "table", "ip", "kpng"], withinMs: 5_000 };

type Fault = "restart" | "api-down" | "broken-edit" | "node-ip";
// nft serves 2,100 more services: its first load (and its repair after a flushed ruleset) goes in batches
const combos: Array<{
  source: SourceKind;
  backend: BackendName;
  compiled?: boolean;
  restartCompiled?: boolean;
  filler?: number;
  faults: Fault[];
  removal?: Removal;
}> = [
  {
    source: "file",
    backend: "nft",
    restartCompiled: true,
    filler: 2_100,
    faults: ["broken-edit", "restart", "node-ip"],
    removal: flushRuleset(5_000),
  },
  // iptables: a canary chain checked every 5 s, then a full restore
  { source: "file", backend: "iptables", faults: ["broken-edit", "restart", "node-ip"], removal: flushRuleset(8_000) },
  { source: "api", backend: "nft", compiled: true, filler: 2_100, faults: ["api-down", "restart", "node-ip"], removal: deleteTable },
  { source: "api", backend: "iptables", faults: ["restart", "node-ip"] },
];

const label = (c: (typeof combos)[number]) =>
  `${c.source === "file" ? "--input" : "--kubeconfig (the real kube-apiserver)"} --backend ${c.backend}${c.compiled ? " (dist/kpng)" : ""}`;

const real = combos.some((c) => c.source === "api") && haveK8s("kpng as deployed against the real kube-apiserver");

for (const c of combos) {
  describe.skipIf(c.source === "api" && !real)(label(c), () => {
    let d: Deployed;
    beforeAll(async () => {
      d = await deploy({
        source: c.source,
        backend: c.backend,
        bin: c.compiled ? await compiledKpng() : undefined,
        filler: c.filler,
        privateApi: c.faults.includes("api-down"),
      });
      // a build of dist/kpng, the API server filled with 2,100 services, a first sync: minutes at load 20+
    }, 300_000);
    afterAll(() => d?.destroy());
    /** a ClusterIP and a NodePort, probed continuously through faults */
    const throughput = (): Probe[] => [
      { ip: ips.clusterIP, port: 80 },
      { ip: d.topo.node.v4, port: nodePorts.tcp },
    ];

    test("flags: the source, --node-name and --backend, nothing more", () => {
      expect(d.args.filter((a) => a.startsWith("--"))).toEqual([
        c.source === "file" ? "--input" : "--kubeconfig",
        "--node-name",
        "--backend",
      ]);
    });

    if (c.filler)
      test(`${c.filler} more services: a first load big enough to go in batches`, async () => {
        const elements = (await canonicalRuleset(d.topo, d.topo.node.ns)).split("\n").filter((l) => l.startsWith("elem ")).length;
        expect(elements).toBeGreaterThanOrEqual(FIRST_LOAD_SPLIT_ELEMENTS);
      });

    test("every service behaves for a client outside the node", async () => {
      const list = checks(d.topo);
      expect(await runChecks(d.topo, list)).toEqual(wanted(list));
    }, 90_000);

    if (c.faults.includes("broken-edit")) {
      // what an operator's edit can leave behind; each keeps the last good state (rules untouched) and logs why
      const edits: Array<{ name: string; content: (good: string) => string | Uint8Array }> = [
        { name: "cut mid-write (not YAML/JSON)", content: (good) => good.slice(0, good.length / 2) },
        { name: "emptied", content: () => "" },
        { name: "a list of numbers", content: () => "[1, 2, 3]\n" },
        { name: "bytes that are not UTF-8 text", content: () => new Uint8Array([0xff, 0xfe, 0xfa, 0x20, 0x6b, 0x69, 0x6e, 0x64]) },
      ];
      for (const e of edits)
        test(`a broken edit of the input file, ${e.name}: rules kept, the file named in the log`, async () => {
          const before = await d.rules();
          const good = readFileSync(d.input!, "utf8");
          const notLoaded = () => d.kpng.stderr.filter((l) => /input file not loaded, keeping the last good state/.test(l));
          const n = notLoaded().length;
          writeFileSync(d.input!, e.content(good));
          try {
            const end = Date.now() + BROKEN_EDIT_BOUND_MS;
            while (notLoaded().length === n && Date.now() < end) await Bun.sleep(20);
            expect(notLoaded().slice(n)[0]).toContain(d.input!);
            expect(await d.rules()).toBe(before);
          } finally {
            writeFileSync(d.input!, good);
          }
        }, 210_000);
      test("after the broken edits: traffic flows as before", async () => {
        const list = checks(d.topo).filter((k) => !k.probes.some((p) => (p.timeout ?? 1) < 1));
        expect(await runChecks(d.topo, list)).toEqual(wanted(list));
      }, 90_000);
    }

    if (c.faults.includes("api-down"))
      test("the API server down for 10 s: no rule change, traffic flows; changes made meanwhile applied when it returns", async () => {
        const api = d.api!;
        const before = await d.rules();
        const synced = d.syncs();
        const probe = await continuousProbe(d.topo, throughput());
        await api.stopApiServer();
        await Bun.sleep(5_000);
        // meanwhile: the service without endpoints gets one, written to etcd (another replica of
        // the control plane would take it; kubectl has no API server to talk to here)
        await putInEtcd(api, "endpointslices/default/empty-ipv4", {
          ...(asSent(
            slice({
              service: "empty",
              ports: [{ name: "http", protocol: "TCP", port: 8080 }],
              endpoints: [{ ip: d.topo.pods[0].v4, node: NODE, pod: "pod0" }],
            }),
          ) as object),
          apiVersion: "discovery.k8s.io/v1",
          metadata: {
            name: "empty-ipv4",
            namespace: "default",
            uid: crypto.randomUUID(),
            creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
            labels: { "kubernetes.io/service-name": "empty" },
          },
        });
        await Bun.sleep(5_000);
        expect(d.syncs()).toBe(synced);
        expect(await d.rules()).toBe(before);
        await api.startApiServer();
        const back = Date.now();
        // kpng retries with client-go's backoff (800 ms doubling up to 30 s, jittered down by up to
        // half): after 10 s down, the next try of a list/watch may be up to ~25 s away
        await d.syncedAfter(synced, 35_000);
        const run = await probe.stop();
        console.log(
          `API server back (${label(c)}): the change made meanwhile applied ${Date.now() - back} ms later; ${run.failed} of ${run.connections} connections failed while it was down`,
        );
        expect(run.failures).toEqual([]);
        expect(await d.topo.probe(d.topo.client.ns, { ip: ips.empty, port: 80 })).toMatchObject({ ok: true, who: "pod0" });
        await d.remove("EndpointSlice", "default", "empty-ipv4");
        await d.syncedAfter(synced + 1);
      }, 150_000);

    const removal = c.removal;
    if (removal)
      test(
        `${removal.what}: restored (target ${removal.withinMs / 1000} s), /healthz 503 until then`,
        async () => {
          const before = await d.rules();
          const healthz: Probe = { ip: d.topo.node.v4, port: 10256, proto: "http", path: "/healthz", timeout: 0.5 };
          // ips.lb has one endpoint (pod1): its timeline changes only when the rules do. /healthz
          // is asked without pause in a probe of its own: the repair may take only tens of ms.
          const probes = await Promise.all([
            continuousProbe(d.topo, [{ ip: ips.lb, port: 80, timeout: 0.2 }], 2),
            continuousProbe(d.topo, [healthz], 0),
          ]);
          const t0 = Date.now();
          await d.topo.exec(d.topo.node.ns, removal.argv);
          let back = 0;
          // The target is printed; the assertion's bound is one a loaded 2-core machine meets (docs/results/2026-11.md).
          while (!back && Date.now() - t0 < LOADED_BOUND_MS) {
            if (comparable(await d.rules()) === comparable(before)) back = Date.now();
            else await Bun.sleep(20);
          }
          await Bun.sleep(200);
          const runs = await Promise.all(probes.map((p) => p.stop()));
          const [svc, health] = runs
            .map((r) => r.timeline[0])
            .map((line) => line.filter(([t]) => t >= t0).map(([t, v]) => `+${Math.round(t - t0)}ms ${v}`));
          console.log(
            `${removal.what} (${label(c)}): rules back after ${back ? back - t0 : "never"} ms; service ${svc.join(", ") || "never failed"}; /healthz ${health.join(", ")}`,
          );
          expect({
            "rules back in time": back > 0 && back - t0 < LOADED_BOUND_MS,
            "kpng logged it": d.kpng.stderr.some((l) => /rules changed by someone else/.test(l)),
            "/healthz said 503": health.some((h) => h.endsWith(" 503")),
            "/healthz says 200 again": health.at(-1)?.endsWith(" 200") ?? false,
            // asked once more with time to answer: the timeline's 0.2 s probes can time out on a loaded machine
            "the service answers again": await d.topo
              .probe(d.topo.client.ns, { ip: ips.lb, port: 80, timeout: 2 })
              .then((r) => r.ok && r.who === "pod1"),
            // nft: kpng reads the kernel's events itself (plugins/nft/netlink-socket.ts), the compiled binary too
            ...(c.backend === "nft" && {
              "nft events read from netlink": d.kpng.stderr.some((l) => /watching kpng's tables through netlink/.test(l)),
            }),
          }).toEqual({
            "rules back in time": true,
            "kpng logged it": true,
            "/healthz said 503": true,
            "/healthz says 200 again": true,
            "the service answers again": true,
            ...(c.backend === "nft" && { "nft events read from netlink": true }),
          });
          if (back - t0 > removal.withinMs) console.log(`  (over the ${removal.withinMs} ms target: a loaded machine?)`);
        },
        LOADED_BOUND_MS + 15_000,
      );

    if (c.faults.includes("restart")) {
      let stickyBefore = "";
      let stickyAfter = "";
      let pinnedBefore: string[] = [];
      let pinnedAfter: string[] = [];
      test(`kill -9, then a new kpng${c.restartCompiled ? " (dist/kpng)" : c.compiled ? " (from source)" : ""}: no connection fails meanwhile, rules untouched`, async () => {
        stickyBefore = await answerOf(d, ips.affinity);
        const before = await d.rules();
        pinnedBefore = pinned(before, d.topo.client.v4);
        const monitor = c.backend === "nft" ? await monitorRuleset(d.topo) : undefined;
        // a probe every few ms: a gap between two steps of the new process's first sync would be hit
        const probe = await continuousProbe(d.topo, throughput(), 5);
        await d.kpng.stop("SIGKILL");
        await Bun.sleep(300);
        // no process: the rules stay as they were
        expect(await d.rules()).toBe(before);
        const next = await d.start({ bin: c.restartCompiled ? await compiledKpng() : undefined });
        await Bun.sleep(300);
        const run = await probe.stop();
        console.log(`restart (${label(c)}): ${run.failed} of ${run.connections} connections failed`);
        // stopped before any expect: a failed one would leave `nft monitor` running, and a
        // listener anywhere on the host makes every nft commit build its notifications
        const txs = await monitor?.stop();
        expect(run.failures).toEqual([]);
        if (txs) {
          // the kernel's view: the first full sync rewrites the tables in place, in one
          // transaction, keeping the affinity sets still wanted (plugins/nft/rewrite-in-place.ts)
          expect(txs.some((tx) => tx.some((l) => l.startsWith("add rule ip kpng ")))).toBe(true);
          expect(txs.flat().filter((l) => /^delete (table|set ip6? kpng aff-)/.test(l))).toEqual([]);
          expect(tablesMissingBetweenTransactions(txs)).toEqual([]);
        }
        expect(run.rounds).toBeGreaterThan(10);
        expect(next.stderr.some((l) => / INFO kpng: synced .*changed=all/.test(l))).toBe(true);
        // the same rules, except what only the traffic wrote (nft affinity sets: checked below)
        expect(comparable(await d.rules())).toBe(comparable(before));
        pinnedAfter = pinned(await d.rules(), d.topo.client.v4);
        stickyAfter = await answerOf(d, ips.affinity);
        // Bounded by its conditions: the new kpng's first sync (d.start waits up to LOADED_WAIT_MS)
        // and the probe's rounds. Its own bound (150 s, kpng-process.ts) leaves room for both on a loaded
        // machine: 20 s here failed a run at load 5-9 in which not one connection failed (issue 38).
      }, 150_000);
      // iptables: the `recent` lists live outside the restore; nft: the first full sync
      // rewrites the tables in place and keeps the affinity sets (plugins/nft/rewrite-in-place.ts)
      test("ClientIP affinity survives a restart: the client stays on its endpoint", () => {
        expect(stickyAfter).toBe(stickyBefore);
        // nft: the client's entry is still in the one affinity set it was in (one in three
        // endpoints would also answer by chance)
        if (c.backend === "nft") {
          expect(pinnedBefore).toHaveLength(1);
          expect(pinnedAfter).toEqual(pinnedBefore);
        }
      });
    }

    // last: it leaves the node on its new address
    if (c.faults.includes("node-ip"))
      test("the Node's IP changed: node ports follow to the new address", async () => {
        const newIP = v4.node(20);
        await d.topo.exec(d.topo.node.ns, ["ip", "addr", "add", `${newIP}/24`, "dev", "ext0"]);
        const t0 = performance.now();
        await d.apply(nodeObject([newIP]));
        const served = checks(d.topo, newIP).filter((k) => k.nodePort && k.want !== "timeout");
        await settledChecks(d.topo, served, LOADED_WAIT_MS);
        console.log(`node IP change (${label(c)}): node ports answered on the new IP after ${Math.round(performance.now() - t0)} ms`);
        const list = checks(d.topo, newIP).filter((k) => k.nodePort);
        expect(await runChecks(d.topo, list)).toEqual(wanted(list));
        // The old address is still the node's, but no longer its Node IP: nft answers node
        // ports on the Node's IPs only (upstream's "primary"), iptables on every local address.
        const old = await d.topo.probe(d.topo.client.ns, { ip: d.topo.node.v4, port: nodePorts.tcp });
        expect(old.ok ? old.who : old.error).toBe(c.backend === "nft" ? "refused" : "pod0");
      }, 150_000);
  });
}

/** which pod answers one TCP connection from the client to ip:80 */
async function answerOf(d: Deployed, ip: string): Promise<string> {
  const r = await d.topo.probe(d.topo.client.ns, { ip, port: 80 });
  return r.ok ? r.who : r.error;
}

/** nft: the affinity sets (`set aff-…`) whose elements hold `client` */
const pinned = (rules: string, client: string) =>
  [...rules.matchAll(/\tset (aff-\S+) \{[^}]*?elements = \{([^}]*)\}/g)]
    .filter(([, , elems]) => elems.split(/[\s,]+/).includes(client))
    .map(([, name]) => name);

/**
 * The rules as a restart must keep them: without the elements traffic added
 * to nft's affinity sets, and without the stamp each kpng process puts on its
 * own transactions (nft sync-stamp: how it tells them from other processes').
 */
const comparable = (rules: string) =>
  inNameOrder(rules.replace(/(\tset (?:aff-|sync-stamp)[^{]*\{[^}]*?)\t\telements = \{[^}]*\}\n/g, "$1"));

/**
 * The tables, and the objects of each table, sorted (nft lists them in
 * creation order): a full sync in place keeps what it still wants (nft's
 * affinity sets; the other family's table after one was deleted), so those
 * come before what it re-created.
 */
const inNameOrder = (rules: string) =>
  !rules.startsWith("table ")
    ? rules // iptables-save
    : [...rules.matchAll(/(table \S+ \S+ \{\n(?:\tcomment [^\n]*\n)?)([\s\S]*?)\n\}\n?/g)]
        .map(([, head, body]) => `${head}${body.split("\n\n").sort().join("\n\n")}\n}\n`)
        .sort()
        .join("");
