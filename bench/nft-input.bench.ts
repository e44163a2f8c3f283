// How a partial sync's transaction reaches nft, measured with the real `nft`
// in a network namespace (never the host's ruleset), with kpng's ruleset of
// 10 and of 10,000 services x 10 endpoints loaded:
//
//   line     the running `nft -i` (plugins/nft/session.ts) reads the
//            statements as one line (libedit: one read() per byte)
//   include  the same session reads `include "<file>"`, the statements
//            written to a private file first (nft reads it buffered)
//   nft -f - a new process per transaction (what full syncs use)
//
// for transactions of 2 statements x 1 element, 2 x 5, 2 x 20, 2 x 100,
// 2 x 1,000, 2 x 10,000 (not as a line) (each deletes the elements the
// previous one added and adds as many new ones in kpng's cluster-endpoints
// map, as a rolling update does) and 200 statements x 1 element. `bun run bench nft-input`; REPS=N for more or fewer repetitions.

import { NftSession } from "../plugins/nft/session.ts";
import { processSpawner } from "../plugins/nft/executor.ts";
import { createNftBackend } from "../plugins/nft/index.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import type { ServiceEndpoints } from "../src/core/brain/state.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology } from "../test/harness/netns.ts";
import { entry, ep, nodeState, svc } from "../test/nft/fixtures.ts";

const REPS = Number(process.env.REPS ?? 15);
const MAP = "add element ip6 kpng cluster-endpoints-tcp";
const DEL = "delete element ip6 kpng cluster-endpoints-tcp";

function service(i: number): ServiceEndpoints {
  const s = svc({ namespace: `ns${i % 50}`, name: `svc${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] });
  const eps = Object.fromEntries(
    Array.from({ length: 10 }, (_, j) => {
      const x = i * 10 + j;
      return [`p${j}`, ep({ ips: [v6.pod(x % 100, 2 + Math.floor(x / 100))], local: x % 100 === 0, ports: { http: 8080 } })];
    }),
  );
  return entry(s, eps);
}

interface Shape {
  name: string;
  statements: number;
  elements: number;
  /** not as a line: libedit reads it a byte per read(), far too slow a repetition */
  noLine?: boolean;
}
const shapes: Shape[] = [
  { name: "2 statements x 1 element", statements: 2, elements: 2 },
  { name: "2 statements x 5 elements", statements: 2, elements: 10 },
  { name: "2 statements x 20 elements", statements: 2, elements: 40 },
  { name: "2 statements x 100 elements", statements: 2, elements: 200 },
  { name: "2 statements x 1,000 elements", statements: 2, elements: 2000 },
  { name: "2 statements x 10,000 elements", statements: 2, elements: 20_000, noLine: true },
  { name: "200 statements x 1 element", statements: 200, elements: 200 },
];

/**
 * The r-th transaction of a shape: deletes generation r-1's elements (keys
 * `<vip> . k`), adds generation r's, half the elements each. Generation 0 is
 * loaded first. `vip` is no service's.
 */
function script(shape: Shape, vip: string, r: number): string {
  const half = shape.elements / 2;
  const keys = Array.from({ length: half }, (_, k) => `${vip} . ${k}`);
  const value = (k: number) => v6.pod(k % 100, 0x3000 + r * 1000 + k);
  const adds = keys.map((key, k) => `${key} : ${value(k)}`);
  if (r === 0) return `${MAP} { ${adds.join(", ")} }\n`;
  if (shape.statements === 2) return `${DEL} { ${keys.join(", ")} }\n${MAP} { ${adds.join(", ")} }\n`;
  return keys.map((key) => `${DEL} { ${key} }\n`).join("") + adds.map((a) => `${MAP} { ${a} }\n`).join("");
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const load = async () => (await Bun.$`uptime`.text()).trim().replace(/.*load/, "load");

export default async function nftInputBench() {
  const topo = await createTopology({ pods: 0, prefix: "kpbi" });
  const oneShot = topo.executor(topo.node.ns);
  try {
    for (const n of [10, 10_000]) {
      const config = defaultConfig({
        nodeName: "node0",
        nodeIPs: [v4.node(0), v6.node(0)],
        clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
      });
      const b = createNftBackend({ config, log: createLogger("bench", { level: "warn" }), out: () => {} }, { exec: oneShot });
      await b.apply(nodeState(Array.from({ length: n }, (_, i) => service(i))), null);
      console.log(`-- ${n} services x 10 endpoints loaded; ${await load()}`);
      const spawner = processSpawner(["ip", "netns", "exec", topo.node.ns]);
      const modes: { name: string; run: (s: string) => Promise<unknown>; close?: () => void }[] = [];
      const line = new NftSession(spawner, { inlineMaxBytes: Infinity });
      const file = new NftSession(spawner, { inlineMaxBytes: 0 });
      modes.push({ name: "line", run: (s) => line.apply(s), close: () => line.close() });
      modes.push({ name: "include", run: (s) => file.apply(s), close: () => file.close() });
      modes.push({ name: "nft -f -", run: (s) => oneShot.run(["nft", "-f", "-"], s) });
      for (const m of modes) await m.run("flush map ip6 kpng no-such-map-warms-up\n").catch(() => {}); // starts the sessions
      for (const [si, shape] of shapes.entries()) {
        const row: string[] = [];
        for (const [mi, m] of modes.entries()) {
          if (shape.noLine && m.name === "line") continue;
          const vip = v6.clusterIP(0xf000 + si * 16 + mi);
          await m.run(script(shape, vip, 0));
          const times: number[] = [];
          for (let r = 1; r <= REPS; r++) {
            const text = script(shape, vip, r);
            const t0 = performance.now();
            await m.run(text);
            times.push(performance.now() - t0);
          }
          await m.run(`${DEL} { ${Array.from({ length: shape.elements / 2 }, (_, k) => `${vip} . ${k}`).join(", ")} }\n`);
          row.push(`${m.name} ${pct(times, 0.5).toFixed(2)}/${pct(times, 0.9).toFixed(2)}`);
        }
        console.log(`${shape.name} (${script(shape, "2001:db8:1::ffff", 1).length} bytes), ms p50/p90 of ${REPS}: ${row.join(", ")}`);
      }
      for (const m of modes) m.close?.();
      await b.cleanup();
      await b.close();
    }
    console.log(await load());
  } finally {
    await topo.destroy();
  }
}
