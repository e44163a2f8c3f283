// The CPU of kpng's start-up between the list bytes and the first node-local
// state, in process: the protobuf lists `bun run bench startup`'s API server
// sends (bench/startup-api-server.ts: the same objects) decoded as the
// reflector decodes them, fed 16 KB TLS records: a streamed list's watch
// frames (WatchDecoder: what kpng asks for first) and pages of 500
// (ListDecoder: its fallback); each item validated and handed to the ingest
// as the Kubernetes source does with a first list (parseObject, Ingest.add);
// then the brain's first compute (the flush after the last list). All of it
// runs once at start-up, cold, under the compiled binary's reluctant JIT
// (build.ts jitPolicy; set here with Bun.unsafe.setJITPolicy): so each
// figure is the first run in a fresh process, the median of KPNG_BENCH_RUNS
// processes (default 5), as the main thread's own CPU time
// (/proc/thread-self/schedstat) per phase, and the wall clock of them all.
//
// `bun bench/ingest-cpu.bench.ts lists N DIR` writes the lists, and
// `[KPNG_BENCH_VIA=pages] bun bench/ingest-cpu.bench.ts child N DIR [PHASE]`
// is one such process; with a PHASE (baseline, decode, validate, ingest) it
// stops after it (baseline: the modules and the bytes loaded, nothing
// done). `valgrind --tool=callgrind` of each gives the instructions of each
// phase, a figure the machine's load does not move provided the JIT and the
// collector run on the main thread (BUN_JSC_useConcurrentJIT=0
// BUN_JSC_useConcurrentGC=0), or with the JIT off (BUN_JSC_useJIT=0: what
// the interpreter runs, which cold code mostly is); with compiled code
// arriving from the JIT's threads, when it arrives moves the count.
// The bench also prints what each phase allocates and keeps per service
// (one child with KPNG_BENCH_ALLOC=1 and JavaScriptCore's GC log).

import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heapStats } from "bun:jsc";
import { Brain } from "../src/core/brain/brain.ts";
import { kinds, parseObject, type K8sObject, type Kind } from "../src/core/brain/k8s/objects.ts";
import { Ingest } from "../src/core/sources/ingest.ts";
import { INITIAL_EVENTS_END } from "../src/core/sources/kube-reflector.ts";
import { ListDecoder, WatchDecoder } from "../src/core/sources/protobuf/envelope.ts";
import { v6 } from "../test/fixtures/addresses.ts";
import { encodeItem, encodeList, encodeWatchEvent } from "../test/harness/protobuf-encode.ts";
import { NODE_NAME, node, service, slice } from "./startup-api-server.ts";

const SIZES = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
const RUNS = Number(process.env.KPNG_BENCH_RUNS ?? 5);
const PAGE = 500;
const RECORD = 16 * 1024;
/** the startup bench's test pod (the last service's endpoint): any pod address serves here */
const POD_V6 = v6.pod(0, 1);

/** where a child stops: after loading (baseline), or after a phase (callgrind of each prefix gives each phase's instructions) */
type Phase = "baseline" | "decode" | "validate" | "ingest" | "compute";
/**
 * KPNG_BENCH_ALLOC=1: each phase ends with a full collection and a line on
 * stderr, so JavaScriptCore's GC log (BUN_JSC_logGC=1) tells what each phase
 * allocated (allocations()), and heapStats what it left alive.
 */
const ALLOC = process.env.KPNG_BENCH_ALLOC === "1";
function mark(phase: Phase) {
  if (!ALLOC) return;
  Bun.gc(true);
  console.error(`phase ${phase} live ${JSON.stringify(heapStats().objectTypeCounts)}`);
}

const threadCpu = () => Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e6;

/**
 * The lists of `n` services, written once into `dir` in both forms kpng
 * reads: `Kind.watch`, a streamed list (ADDED frames, then the BOOKMARK
 * that ends them: what kpng asks for first), and `Kind-page.pb`, pages of
 * 500 (what it falls back to).
 */
function writeLists(n: number, dir: string) {
  mkdirSync(dir, { recursive: true });
  const write = (kind: Kind, objects: Array<Record<string, unknown>>) => {
    const apiVersion = kind === "EndpointSlice" ? "discovery.k8s.io/v1" : "v1";
    const items = objects.map((o) => encodeItem(kind, o));
    const frames = objects.map((o, i) => encodeWatchEvent("ADDED", kind, { ...o, apiVersion }, items[i]));
    const end = { kind, apiVersion, metadata: { resourceVersion: "7", annotations: { [INITIAL_EVENTS_END]: "true" } } };
    frames.push(encodeWatchEvent("BOOKMARK", kind, end));
    writeFileSync(join(dir, `${kind}.watch`), Buffer.concat(frames));
    for (let p = 0; p * PAGE < objects.length; p++) {
      const cont = (p + 1) * PAGE < objects.length ? `page-${p + 1}` : "";
      const body = encodeList(kind, items.slice(p * PAGE, (p + 1) * PAGE), { resourceVersion: "7", continue: cont });
      writeFileSync(join(dir, `${kind}-${String(p).padStart(4, "0")}.pb`), body);
    }
  };
  write("Node", [node(0)]);
  write(
    "Service",
    Array.from({ length: n }, (_, i) => service(i)),
  );
  write(
    "EndpointSlice",
    Array.from({ length: n }, (_, i) => slice(i, n, POD_V6)),
  );
}

interface Figures {
  decodeMs: number;
  validateMs: number;
  ingestMs: number;
  computeMs: number;
  /** main-thread CPU of lists + compute */
  cpu: number;
  wall: number;
  services: number;
}

/**
 * One cold run over the lists in `dir`, phase after phase, each timed on its
 * own: decode every page (the Node's, then the Services' and EndpointSlices'
 * in turn, as they arrive side by side), validate every item, hand them to
 * the ingest, compute.
 */
function run(dir: string, via: string, until: Phase): Figures | null {
  const files = readdirSync(dir).sort();
  const ext = via === "pages" ? ".pb" : ".watch";
  /** each body (a page, or the stream) cut into TLS records, decoded by one decoder */
  const bodies = (kind: Kind) =>
    files
      .filter((f) => f.startsWith(kind) && f.endsWith(ext))
      .map((f) => {
        const b = readFileSync(join(dir, f));
        const records = Array.from({ length: Math.ceil(b.length / RECORD) }, (_, i) => b.subarray(i * RECORD, (i + 1) * RECORD));
        return { kind, records };
      });
  // the Node's first; then the Services' and the EndpointSlices' records in turn, as they arrive side by side
  const order: Array<{ kind: Kind; body: number; record: Buffer }> = [];
  const all = [bodies("Node"), bodies("Service"), bodies("EndpointSlice")];
  for (const [i, b] of all[0].entries()) for (const record of b.records) order.push({ kind: "Node", body: i, record });
  const flat = (k: 1 | 2) => all[k].flatMap((b, i) => b.records.map((record) => ({ kind: b.kind, body: i, record })));
  const [svcs, slcs] = [flat(1), flat(2)];
  for (let i = 0; i < Math.max(svcs.length, slcs.length); i++) {
    if (i < svcs.length) order.push(svcs[i]);
    if (i < slcs.length) order.push(slcs[i]);
  }
  const brain = new Brain({ nodeIPOverride: { node: NODE_NAME, ips: [] } });
  const ingest = new Ingest(brain, { type: "at-once" });
  if (until === "baseline") return null;
  const f: Figures = { decodeMs: 0, validateMs: 0, ingestMs: 0, computeMs: 0, cpu: 0, wall: 0, services: 0 };
  mark("baseline");
  const c0 = threadCpu();
  const w0 = performance.now();
  const items: Array<[Kind, Record<string, unknown>]> = [];
  const decoders = new Map<string, ListDecoder | WatchDecoder>();
  for (const { kind, body, record } of order) {
    const id = `${kind}/${body}`;
    let d = decoders.get(id);
    if (!d) decoders.set(id, (d = via === "pages" ? new ListDecoder(kind) : new WatchDecoder()));
    if (d instanceof ListDecoder) for (const raw of d.push(record)) items.push([kind, raw]);
    else for (const ev of d.push(record)) if (ev.type === "ADDED") items.push([kind, ev.object]);
  }
  const c1 = threadCpu();
  mark("decode");
  if (until === "decode") return null;
  const objects: K8sObject[] = [];
  for (const [kind, raw] of items) {
    const res = parseObject(raw, kind);
    if (res.ok) objects.push(res.object);
  }
  const c2 = threadCpu();
  mark("validate");
  if (until === "validate") return null;
  for (const o of objects) ingest.add(o); // as the Kubernetes source hands over a first list
  const c3 = threadCpu();
  mark("ingest");
  if (until === "ingest") return null;
  const view = brain.view(NODE_NAME);
  for (const kind of kinds) ingest.synced(kind);
  ingest.changed();
  const c4 = threadCpu();
  mark("compute");
  f.wall = performance.now() - w0;
  Object.assign(f, { decodeMs: c1 - c0, validateMs: c2 - c1, ingestMs: c3 - c2, computeMs: c4 - c3, cpu: c4 - c0 });
  f.services = view.state?.services.size ?? 0;
  return f;
}

interface Allocated {
  phase: Phase;
  /** bytes allocated in the phase (the GC log's heap size at each collection's start, less that after the one before) */
  bytes: number;
  /** collections the phase's own allocation set off (the forced one at its end not counted) */
  collections: number;
  /** objects alive after the phase, by type, less those before it: what it keeps */
  kept: Record<string, number>;
}

/** One child with allocations marked (KPNG_BENCH_ALLOC) and JavaScriptCore's GC log: what each phase allocated and kept. */
function allocations(n: number, dir: string, via: string): Allocated[] {
  const child = Bun.spawnSync([process.execPath, import.meta.path, "child", String(n), dir], {
    env: { ...process.env, KPNG_BENCH_VIA: via, KPNG_BENCH_ALLOC: "1", BUN_JSC_logGC: "1" },
  });
  const out: Allocated[] = [];
  let after = 0;
  let bytes = 0;
  let collections = 0;
  let live: Record<string, number> | undefined;
  for (const line of child.stderr.toString().split("\n")) {
    const start = / START \w+ (\d+)kb => \w+Collection/.exec(line);
    if (start) {
      bytes += (Number(start[1]) - after) * 1024;
      collections++;
    }
    const end = /=> (\d+)kb, p=/.exec(line);
    if (end) after = Number(end[1]);
    const phase = /^phase (\w+) live (.*)$/.exec(line);
    if (!phase) continue;
    const now = JSON.parse(phase[2]) as Record<string, number>;
    if (live) {
      const kept: Record<string, number> = {};
      for (const [type, count] of Object.entries(now)) if (count !== (live[type] ?? 0)) kept[type] = count - (live[type] ?? 0);
      out.push({ phase: phase[1] as Phase, bytes, collections: collections - 1, kept });
    }
    live = now;
    bytes = 0;
    collections = 0;
  }
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

export default async function bench() {
  const root = `/tmp/kpng-ingest-bench-${process.pid}`;
  console.log(`cold, main thread CPU, median of ${RUNS} fresh processes (load ${readFileSync("/proc/loadavg", "utf8").split(" ")[0]})`);
  console.log("services  list as    decode  validate  ingest  compute  | cpu    wall   (ms)");
  for (const n of SIZES) {
    const dir = join(root, String(n));
    writeLists(n, dir);
    for (const via of ["watch", "pages"]) {
      const runs: Figures[] = [];
      for (let r = 0; r < RUNS; r++) {
        const child = Bun.spawnSync([process.execPath, import.meta.path, "child", String(n), dir], {
          env: { ...process.env, KPNG_BENCH_VIA: via },
          stderr: "inherit",
        });
        runs.push(JSON.parse(child.stdout.toString()) as Figures);
      }
      const m = (k: keyof Figures) =>
        median(runs.map((x) => x[k]))
          .toFixed(1)
          .padStart(6);
      console.log(
        `${String(n).padStart(8)}  ${via.padEnd(7)}  ${m("decodeMs")}  ${m("validateMs")}    ${m("ingestMs")}   ${m("computeMs")}  | ${m("cpu")} ${m("wall")}`,
      );
    }
  }
  // What each phase allocates, per object of its kind (a Service and its slice
  // of 10 endpoints at each size): garbage is what sets JavaScriptCore's
  // collections off during start-up (an eden collection every few MB).
  console.log("allocated per service (its slice included), KB; [collections the phase set off]; objects kept per service");
  for (const n of SIZES) {
    const dir = join(root, String(n));
    for (const via of ["watch", "pages"]) {
      const phases = allocations(n, dir, via)
        .map((a) => {
          const kept = Object.values(a.kept).reduce((x, y) => x + y, 0);
          return `${a.phase} ${(a.bytes / n / 1024).toFixed(2)} [${a.collections}] ${(kept / n).toFixed(1)}`;
        })
        .join("   ");
      console.log(`${String(n).padStart(8)}  ${via.padEnd(7)}  ${phases}`);
    }
  }
  rmSync(root, { recursive: true, force: true });
}

if (import.meta.main) {
  const [cmd, n, dir, until] = process.argv.slice(2);
  if (cmd === "lists") writeLists(Number(n), dir);
  else if (cmd === "child") {
    // the compiled binary's start-up policy (build.ts): tier-up thresholds x8
    Bun.unsafe.setJITPolicy?.(8);
    const f = run(dir, process.env.KPNG_BENCH_VIA ?? "watch", (until as Phase | undefined) ?? "compute");
    if (f) console.log(JSON.stringify(f));
  } else await bench();
}
