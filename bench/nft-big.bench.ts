// A big service rolled with the nft backend, through the brain, on the real
// `nft` inside a network namespace (test/harness/netns.ts; never the host's
// ruleset). `bun run bench nft` runs it after nft.bench.ts, `bun run bench
// nft-big` alone (WAVES=N for fewer waves while trying things).
//
// The cluster: 10,000 services x 10 endpoints on 100 nodes, plus one service
// with SIZE endpoints in EndpointSlices of 100 (SIZE = 5,000 and 500). It is
// rolled as a Deployment rolls: 50 waves, each replacing one slice's 100
// endpoints with new pods (new names, new addresses). A wave is one slice
// upsert given to the brain, the revision it publishes, and that revision
// applied by the nft backend (the `nft -i` session). Figures per wave:
// brain (upsert + flush), render, apply, "revision applied" (render +
// apply), the whole wave, nft statements, map/set elements written and bytes
// sent. Stable dispatch positions (plugins/nft/positions.ts) make the last
// three the same at both sizes.
//
// IPv6 single-stack, as in nft.bench.ts: the address plan's IPv4 service
// range holds only 4,096 cluster IPs.

import { readFileSync } from "node:fs";
import { processSpawner } from "../plugins/nft/executor.ts";
import { createNftBackend, type NftBackend } from "../plugins/nft/index.ts";
import type { Spawner } from "../plugins/nft/session.ts";
import { Brain } from "../src/core/brain/brain.ts";
import { kinds, parseObject, type K8sObject } from "../src/core/brain/k8s/objects.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import type { Executor } from "../src/host/backend.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { canonical6, createTopology, type Topology } from "../test/harness/netns.ts";

const SERVICES = 10_000;
const ENDPOINTS = 10;
const NODES = 100;
const SLICE = 100;
const WAVES = Number(process.env.WAVES ?? 50);
const NODE = "node-0";

function must(raw: unknown): K8sObject {
  const r = parseObject(raw);
  if (!r.ok) throw new Error(`bench object invalid: ${JSON.stringify(raw).slice(0, 200)}`);
  return r.object;
}

const service = (ns: string, name: string, clusterIP: string) =>
  must({
    kind: "Service",
    metadata: { namespace: ns, name, resourceVersion: "1" },
    spec: {
      type: "ClusterIP",
      clusterIP,
      clusterIPs: [clusterIP],
      ipFamilies: ["IPv6"],
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
    },
  });

/** endpoints as (pod name, address, node index) */
const slice = (ns: string, svc: string, name: string, eps: { pod: string; ip: string; node: number }[], gen: number) =>
  must({
    kind: "EndpointSlice",
    metadata: { namespace: ns, name, labels: { "kubernetes.io/service-name": svc }, resourceVersion: String(gen + 1) },
    addressType: "IPv6",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: eps.map((e) => ({
      addresses: [e.ip],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: `node-${e.node}`,
      targetRef: { kind: "Pod", name: e.pod, namespace: ns },
    })),
  });

/** the 10,000 ordinary services and the nodes; endpoints spread over the nodes (1% on this one) */
function cluster(): K8sObject[] {
  const out: K8sObject[] = [];
  for (let k = 0; k < NODES; k++) out.push(must({ kind: "Node", metadata: { name: `node-${k}` } }));
  for (let i = 0; i < SERVICES; i++) {
    const ns = `ns${i % 50}`;
    out.push(service(ns, `svc${i}`, v6.clusterIP(i + 1)));
    const eps = Array.from({ length: ENDPOINTS }, (_, j) => {
      const x = i * ENDPOINTS + j;
      return { pod: `svc${i}-${j}`, ip: v6.pod(x % NODES, 2 + Math.floor(x / NODES)), node: x % NODES };
    });
    out.push(slice(ns, `svc${i}`, `svc${i}-abcde`, eps, 0));
  }
  return out;
}

/**
 * Slice s of the big service in generation `gen`: 100 pods, spread over the
 * nodes; each generation has new names and addresses (pod address suffixes from
 * 0x1000 up, clear of the ordinary services').
 */
function bigSlice(size: number, s: number, gen: number) {
  const eps = Array.from({ length: SLICE }, (_, k) => {
    const j = s * SLICE + k;
    return { pod: `roll-g${gen}-${j}`, ip: v6.pod(j % NODES, 0x1000 + gen * size + j), node: j % NODES };
  });
  return slice("big", "roll", `roll-${String(s).padStart(2, "0")}`, eps, gen);
}

/** the statements behind what was written to `nft -i`: the file's when it is an include (session.ts) */
const statementsOf = (text: string) => {
  const file = /^include "(.*)"\n/.exec(text)?.[1];
  return file ? readFileSync(file, "utf8") : text;
};

/** records what each transaction sent, to count elements and bytes (a file's read as it is sent: a few µs in "apply") */
function recording(exec: Executor, spawner: Spawner) {
  const sent = { text: "" };
  return {
    sent,
    exec: { run: (argv: string[], stdin?: string) => ((sent.text = stdin ?? ""), exec.run(argv, stdin)) } satisfies Executor,
    spawner: {
      spawn: (argv, on, env) => {
        const ch = spawner.spawn(argv, on, env);
        return { write: (t: string) => ((sent.text = statementsOf(t)), ch.write(t)), kill: () => ch.kill() };
      },
    } satisfies Spawner,
  };
}

/** map/set elements in a transaction's text (element lists hold no commas but between elements) */
function elementsIn(text: string): number {
  let n = 0;
  for (const m of text.matchAll(/(?:add|delete) element \S+ kpng \S+ \{ ([^}]*) \}/g)) n += m[1].split(", ").length;
  return n;
}

function backend(rec: ReturnType<typeof recording>): NftBackend {
  const config = defaultConfig({
    nodeName: NODE,
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
  });
  return createNftBackend(
    { config, log: createLogger("bench", { level: "warn" }), out: () => {} },
    { exec: rec.exec, interactive: rec.spawner },
  );
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const dist = (xs: number[]) =>
  `p50 ${pct(xs, 0.5).toFixed(1)}, p90 ${pct(xs, 0.9).toFixed(1)}, p99 ${pct(xs, 0.99).toFixed(1)}, max ${Math.max(...xs).toFixed(1)} ms`;
const range = (xs: number[]) =>
  Math.min(...xs) === Math.max(...xs) ? `${xs[0]}` : `${Math.min(...xs)}-${Math.max(...xs)} (median ${pct(xs, 0.5)})`;
const load = async () => (await Bun.$`uptime`.text()).trim().replace(/.*load/, "load");

async function roll(topo: Topology, base: K8sObject[], size: number) {
  const rec = recording(topo.executor(topo.node.ns), processSpawner(["ip", "netns", "exec", topo.node.ns]));
  const b = backend(rec);
  const brain = new Brain();
  const view = brain.view(NODE);
  let rev: { state: Parameters<NftBackend["apply"]>[0]; change: Parameters<NftBackend["apply"]>[1] } | undefined;
  view.subscribe((r) => (rev = r));
  const slices = size / SLICE;
  brain.apply(
    [...base, service("big", "roll", v6.clusterIP(SERVICES + 1)), ...Array.from({ length: slices }, (_, s) => bigSlice(size, s, 0))].map(
      (object) => ({ type: "upsert" as const, object }),
    ),
  );
  for (const k of kinds) brain.markSynced(k);
  brain.flush();
  await b.apply(rev!.state, null);
  const full = b.last!;
  console.log(
    `full sync, ${SERVICES} services x ${ENDPOINTS} + 1 x ${size} endpoints: render ${full.renderMs.toFixed(0)} ms, apply ${full.applyMs.toFixed(0)} ms`,
  );
  // a first change starts the `nft -i` session: not a wave
  brain.apply([{ type: "upsert", object: bigSlice(size, 0, 0) }]);
  await b.apply(rev!.state, new Set(["big/roll"]));

  const w = {
    brain: [] as number[],
    render: [] as number[],
    apply: [] as number[],
    applied: [] as number[],
    total: [] as number[],
    statements: [] as number[],
    elements: [] as number[],
    bytes: [] as number[],
  };
  for (let wave = 0; wave < WAVES; wave++) {
    const s = wave % slices;
    const gen = 1 + Math.floor(wave / slices);
    const t0 = performance.now();
    brain.apply([{ type: "upsert", object: bigSlice(size, s, gen) }]);
    brain.flush();
    const brainMs = performance.now() - t0;
    if (rev!.change?.size !== 1) throw new Error(`wave ${wave}: change set ${[...(rev!.change ?? ["all"])]}`);
    await b.apply(rev!.state, rev!.change);
    const l = b.last!;
    if (l.full) throw new Error(`wave ${wave} ran as a full sync`);
    w.brain.push(brainMs);
    w.render.push(l.renderMs);
    w.apply.push(l.applyMs);
    w.applied.push(l.renderMs + l.applyMs);
    w.total.push(brainMs + l.renderMs + l.applyMs);
    w.statements.push(l.statements);
    w.elements.push(elementsIn(rec.sent.text));
    w.bytes.push(rec.sent.text.length);
  }
  // the kernel holds exactly the last generation of the big service
  const map = await topo.exec(topo.node.ns, ["nft", "-j", "list", "map", "ip6", "kpng", "cluster-endpoints-tcp"]);
  const bigIP = v6.clusterIP(SERVICES + 1);
  const held = (JSON.parse(map).nftables as { map?: { elem?: [{ concat: [string, number] }, string][] } }[])
    .flatMap((x) => x.map?.elem ?? [])
    .filter(([k]) => k.concat[0] === bigIP);
  const lastGen = Math.floor((WAVES - 1) / slices) + 1;
  const want = new Set(
    Array.from({ length: size }, (_, j) => j)
      .map((j) => (j < (((WAVES - 1) % slices) + 1) * SLICE ? lastGen : lastGen - 1))
      .map((g, j) => canonical6(v6.pod(j % NODES, 0x1000 + g * size + j))),
  );
  const positions = held.map(([k]) => k.concat[1]).sort((a, b) => a - b);
  const ok = held.length === size && held.every(([, ip]) => want.has(ip)) && positions.every((p, i) => p === i);
  await b.cleanup();
  await b.close();
  return { size, w, ok };
}

export default async function nftBigBench() {
  const topo = await createTopology({ pods: 0, prefix: "kpbb" });
  try {
    const base = cluster();
    for (const size of [5000, 500]) {
      console.log(
        `-- one service of ${size} endpoints (${size / SLICE} slices of ${SLICE}), ${WAVES} waves of ${SLICE} replaced endpoints; ${await load()}`,
      );
      const { w, ok } = await roll(topo, base, size);
      console.log(`revision applied (render + apply): ${dist(w.applied)}`);
      console.log(`wave, slice in to rules in (brain + render + apply): ${dist(w.total)}`);
      console.log(`  brain ${dist(w.brain)}`);
      console.log(`  render ${dist(w.render)}`);
      console.log(`  apply ${dist(w.apply)}`);
      console.log(`  per wave: ${range(w.statements)} statements, ${range(w.elements)} elements, ${range(w.bytes)} bytes`);
      console.log(`  kernel after the roll holds exactly the live endpoints at positions [0, ${size}): ${ok ? "yes" : "NO"}`);
    }
    console.log(await load());
  } finally {
    await topo.destroy();
  }
}
