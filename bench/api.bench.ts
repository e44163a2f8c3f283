// The API: a 10,000-service x 10-endpoint state streamed to a sidecar over
// the unix socket (both RPCs, the first stream after a change, when every
// object is marshalled, and a later one), one endpoint change from the
// brain to a sidecar's callback (and from an input-file edit, on the example
// cluster), server memory with 10 watchers attached, and dist/kpng's start-up
// to its first served request. Prints figures, asserts nothing.
// `bun run bench api`.

import { mkdtempSync, rmSync, writeFileSync, existsSync, readFileSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Brain } from "../src/core/brain/brain.ts";
import { connectGrpc } from "../src/core/api/client/grpc.ts";
import { nextSnapshot } from "../src/core/api/client/streams.ts";
import { createLogger } from "../src/core/log.ts";
import { startApiServer } from "../src/core/api/server/index.ts";
import { brainWith, serviceObjects, upsert } from "../test/api/brain-fixture.ts";
import type { GenOptions } from "../test/api/gen-cluster.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const ms = (t: number) => `${t.toFixed(0)} ms`;
const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const now = () => performance.timeOrigin + performance.now();

/** A sidecar process on kpng's client library: prints `<event> <epoch ms> <services> <endpoints>` per revision. */
const SIDECAR = `
import { watchStates } from ${JSON.stringify(join(ROOT, "src/core/api/client/index.ts"))};
import { createLogger } from ${JSON.stringify(join(ROOT, "src/core/log.ts"))};
const [api, nodeName, protocol, rounds] = process.argv.slice(2);
for (let r = 0; r < Number(rounds); r++) {
  const ac = new AbortController();
  const t0 = performance.now();
  for await (const rev of watchStates({ api, nodeName, protocol, signal: ac.signal, log: createLogger("sidecar", { level: "error" }) })) {
    const eps = [...rev.state.services.values()].reduce((n, s) => n + s.endpoints.size, 0);
    console.log(\`full \${(performance.now() - t0).toFixed(1)} \${rev.state.services.size} \${eps}\`);
    if (r < Number(rounds) - 1) { ac.abort(); break; }
    console.log(\`rev \${performance.timeOrigin + performance.now()} \${rev.change ? [...rev.change].join(",") : "all"}\`);
  }
}
`;

function spawnSidecar(dir: string, args: string[]) {
  const file = join(dir, "sidecar.ts");
  writeFileSync(file, SIDECAR);
  const p = Bun.spawn([BUN, file, ...args], { stdout: "pipe", stderr: "inherit" });
  const lines: string[] = [];
  let wake = () => {};
  void (async () => {
    let rest = "";
    for await (const chunk of p.stdout) {
      const parts = (rest + new TextDecoder().decode(chunk)).split("\n");
      rest = parts.pop()!;
      lines.push(...parts);
      wake();
    }
  })();
  const waitLines = async (n: number, re: RegExp) => {
    for (;;) {
      const m = lines.filter((l) => re.test(l));
      if (m.length >= n) return m;
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 100);
      });
    }
  };
  return { p, lines, waitLines };
}

async function fullState(dir: string, sock: string, gen: GenOptions) {
  console.log(`\nfull state of ${gen.services} services x ${gen.endpoints} endpoints to a sidecar over the unix socket (target <= 1 s)`);
  const t0 = performance.now();
  const brain = brainWith(gen);
  brain.view("node-1");
  console.log(`  brain computed the state in ${ms(performance.now() - t0)} (not part of the figure)`);
  const server = await startApiServer({
    brain,
    listen: [`unix://${sock}`],
    defaultNodeName: "node-1",
    log: createLogger("bench", { level: "error" }),
  });
  for (const protocol of ["watch", "next"]) {
    // The server marshals the brain's own node (node-1) as it starts, so round 1 costs
    // what rounds 2-3 do; a first stream for another node would marshal then.
    const s = spawnSidecar(dir, [`unix://${sock}`, "node-1", protocol, "3"]);
    const full = await s.waitLines(3, /^full /);
    const [first, ...rest] = full.map((l) => Number(l.split(" ")[1]));
    const [, , services, eps] = full[0].split(" ");
    console.log(
      `  ${protocol.padEnd(5)} ${services} services / ${eps} endpoints: first stream ${ms(first)}, later streams ${rest.map(ms).join(", ")}`,
    );
    s.p.kill();
    await s.p.exited;
  }
  return { brain, server };
}

async function oneChange(dir: string, sock: string, brain: Brain, gen: GenOptions) {
  console.log(
    `\none endpoint change, brain revision -> sidecar callback, ${gen.services} x ${gen.endpoints} (target <= 20 ms from a file edit)`,
  );
  const s = spawnSidecar(dir, [`unix://${sock}`, "node-1", "watch", "1"]);
  await s.waitLines(1, /^rev /);
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    // a different service each time: its first endpoint turns unready
    const [, slice] = serviceObjects(gen, i * 97);
    slice.endpoints[0].conditions.ready = false;
    const t0 = now();
    upsert(brain, slice);
    const revs = await s.waitLines(i + 2, /^rev /);
    times.push(Number(revs[i + 1].split(" ")[1]) - t0);
  }
  console.log(
    `  event applied -> callback: median ${times.length ? median(times).toFixed(1) : "?"} ms, max ${Math.max(...times).toFixed(1)} ms (10 changes)`,
  );
  s.p.kill();
  await s.p.exited;
}

async function fileEdit(dir: string) {
  console.log("\none endpoint change from an input-file edit to a sidecar's callback (examples/cluster.yaml; `kpng serve` process)");
  const input = join(dir, "cluster.yaml");
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
  const sock = join(dir, "edit.sock");
  const serve = Bun.spawn([BUN, join(ROOT, "src/main.ts"), "serve", "--input", input, "--listen", `unix://${sock}`], {
    stdout: "ignore",
    stderr: "ignore",
  });
  while (!existsSync(sock)) await Bun.sleep(20);
  const s = spawnSidecar(dir, [`unix://${sock}`, "node-1", "watch", "1"]);
  await s.waitLines(1, /^rev /);
  const text = readFileSync(input, "utf8");
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    const t0 = now();
    writeFileSync(input, i % 2 === 0 ? text.replace(/(- 198\.19\.2\.10\n\s+conditions:\n\s+ready:) true/, "$1 false") : text);
    const revs = await s.waitLines(i + 2, /^rev /);
    times.push(Number(revs[i + 1].split(" ")[1]) - t0);
    await Bun.sleep(50);
  }
  console.log(
    `  file written -> callback: median ${median(times).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms (10 edits; file read, parse, brain, API, client)`,
  );
  s.p.kill();
  serve.kill();
  await Promise.all([s.p.exited, serve.exited]);
}

async function watchersMemory(dir: string, sock: string) {
  console.log("\nbrain process memory with 10 watchers attached");
  const heap = () => {
    Bun.gc(true);
    return process.memoryUsage();
  };
  const attach = async (nodes: string[]) => {
    const before = heap();
    const s = nodes.map((n) => spawnSidecar(dir, [`unix://${sock}`, n, "watch", "1"]));
    await Promise.all(s.map((x) => x.waitLines(1, /^rev /)));
    const after = heap();
    for (const x of s) x.p.kill();
    await Promise.all(s.map((x) => x.p.exited));
    const d = after.heapUsed - before.heapUsed;
    return `heap used ${d < 0 ? "-" : "+"}${mib(Math.abs(d))} (${mib(before.heapUsed)} -> ${mib(after.heapUsed)}), rss ${mib(before.rss)} -> ${mib(after.rss)}`;
  };
  console.log(`  10 watchers of node-1 (a view the brain already had): ${await attach(Array(10).fill("node-1"))}`);
  // A new node name is a new view: the brain computes and keeps that node's state.
  console.log(`  10 watchers over node-1..3 (two new views): ${await attach(Array.from({ length: 10 }, (_, i) => `node-${(i % 3) + 1}`))}`);
}

async function startup(dir: string) {
  console.log("\ndist/kpng start-up to first served request (target <= 150 ms)");
  const bin = join(ROOT, "dist/kpng");
  // Always rebuilt: a stale binary would measure yesterday's code.
  const b = Bun.spawn([BUN, "run", "build"], { cwd: ROOT, stdout: "ignore", stderr: "inherit" });
  if ((await b.exited) !== 0) return console.log("  build failed; skipped");
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    const sock = join(dir, `start-${i}.sock`);
    const t0 = performance.now();
    const p = Bun.spawn(
      [bin, "serve", "--input", join(ROOT, "examples/cluster.yaml"), "--node-name", "node-1", "--listen", `unix://${sock}`],
      { stdout: "ignore", stderr: "ignore" },
    );
    for (;;) {
      if (existsSync(sock)) {
        const conn = connectGrpc({ kind: "unix", path: sock });
        const ok = await nextSnapshot(conn, { instanceID: 0n, rev: 0n, nodeName: "node-1" }, AbortSignal.timeout(1000)).then(
          () => true,
          () => false,
        );
        conn.close();
        if (ok) break;
      }
      await Bun.sleep(2);
    }
    times.push(performance.now() - t0);
    p.kill();
    await p.exited;
  }
  console.log(`  spawn -> first Next answered: median ${ms(median(times))} (${times.map(ms).join(", ")})`);
}

export default async function () {
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-api-"));
  try {
    const gen: GenOptions = { services: 10_000, endpoints: 10, nodes: 3 };
    const sock = join(dir, "api.sock");
    const { brain, server } = await fullState(dir, sock, gen);
    await oneChange(dir, sock, brain, gen);
    await watchersMemory(dir, sock);
    await server.close();
    await fileEdit(dir);
    await startup(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
