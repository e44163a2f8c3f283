// The iptables backend with the host's real iptables-restore in a network
// namespace made for the run: the first full restore at 1,000 and 10,000
// services x 10 endpoints (half of them on this node, as issue 11's
// workload), then one endpoint change at each size (restore input size and
// wall time), the periodic full restore and a canary check; the backend runs
// as deployed (the first restore streamed, each restore settled at the
// marker it echoes). Then the same first and one-change inputs fed by hand
// to each iptables-restore flavour installed (nf_tables, legacy) in fresh
// namespaces: the floor inside the tool, as the wall to the marker (where a
// sync goes on) and to the exit (iptables-nft's close of its netlink socket
// waits for the kernel to free the replaced rules). Beside the one-change
// input, the floor of any change of the nat
// table: one rule added to a new chain nothing jumps to (the kernel validates
// every rule reachable from the table's base chains at each commit that adds
// a rule; this rule adds nothing to that walk), a new chain alone (no rule:
// no validation) and the same rule in the filter table. The by-hand first
// restore waits for a host without nftables event listeners (the kernel
// builds an event per rule while one exists anywhere on the host) and prints
// how many were left. Prints figures, asserts nothing. `bun run bench iptables`.

import { create } from "@bufbuild/protobuf";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import { EndpointSchema, Protocol, ServiceSchema } from "../src/gen/localv1/services_pb.ts";
import type { Executor } from "../src/host/backend.ts";
import { restoredMarker, spawnExecutor } from "../plugins/iptables/executor.ts";
import { IptablesBackend } from "../plugins/iptables/index.ts";
import { plan, v4 } from "../test/fixtures/addresses.ts";
import { quietNft } from "./startup.bench.ts";

/** KPNG_BENCH_SIZES (default "1000,10000"): the cluster sizes, in services */
const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
const endpointsPer = 10;

// The plan's service range holds 4,096 cluster IPs: past that, services
// share an address on another port (the same rule count as distinct IPs).
const clusterIP = (i: number) => v4.clusterIP(i % 4096);
const servicePort = (i: number) => 80 + Math.floor(i / 4096);
// 65,536 pod addresses in the cluster CIDR; endpoint k of the run gets one.
const podIP = (k: number) => v4.pod((k >> 8) & 255, k & 255);

function service(i: number) {
  return create(ServiceSchema, {
    Namespace: "bench",
    Name: `svc-${i}`,
    Type: "ClusterIP",
    IPs: { ClusterIPs: { V4: [clusterIP(i)], V6: [] } },
    Ports: [{ Name: "http", Protocol: Protocol.TCP, Port: servicePort(i), TargetPort: 8080 }],
  });
}

// Half the endpoints of each service on this node.
const endpoint = (k: number) =>
  create(EndpointSchema, {
    IPs: { V4: [podIP(k)], V6: [] },
    Local: k % 2 === 0,
    Scopes: { Internal: true, External: true },
    PortOverrides: [{ Name: "http", Port: 8080 + (k >> 16) }],
  });

const kb = (n: number) => (n / 1024).toFixed(1) + " KiB";
const ms = (t: number) => t.toFixed(1) + " ms";

async function sh(argv: string[]) {
  const p = Bun.spawn(argv, { stdout: "ignore", stderr: "pipe" });
  const code = await p.exited;
  if (code !== 0) throw new Error(`${argv.join(" ")}: exit ${code}: ${await new Response(p.stderr).text()}`);
}

const newNs = async () => {
  const ns = `kpb${Math.random().toString(36).slice(2, 8)}`;
  await sh(["ip", "netns", "add", ns]);
  return ns;
};

const repeats = 5;
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
/** best / median of a few samples: the machine is shared, so one sample says little */
const spread = (xs: number[]) => `best ${ms(sorted(xs)[0])} / median ${ms(sorted(xs)[Math.floor(xs.length / 2)])}`;

/**
 * One run of `command --noflush -v` in `ns`, its input ending in the marker
 * kpng's executor adds: wall time to the marker (when kpng's sync goes on),
 * to the exit (the netlink socket's close waits for the kernel to free the
 * rules the commit replaced), and the CPU time (user + system) it used.
 */
async function feed(ns: string, command: string, input: string) {
  const t = performance.now();
  const p = Bun.spawn(["ip", "netns", "exec", ns, command, "--noflush", "-w", "5", "-v"], {
    stdin: new TextEncoder().encode(`${input}${restoredMarker}\n`),
    stdout: "pipe",
    stderr: "pipe",
  });
  let marked = NaN;
  const decoder = new TextDecoder();
  let out = "";
  for await (const chunk of p.stdout) {
    out += decoder.decode(chunk, { stream: true });
    if (Number.isNaN(marked) && out.includes(`${restoredMarker}\n`)) marked = performance.now() - t;
  }
  const code = await p.exited;
  const wall = performance.now() - t;
  if (code !== 0) throw new Error(`${command}: exit ${code}: ${await new Response(p.stderr).text()}`);
  const cpu = p.resourceUsage()?.cpuTime;
  return { wall, marked, cpu: cpu ? Number(cpu.user + cpu.system) / 1000 : NaN };
}

/** Inputs that change the nat table as little as possible: the floor under any one-change restore (see the header). */
const floors = [
  { name: "one rule in a new nat chain", input: "*nat\n:KPNG-FLOOR - [0:0]\n-A KPNG-FLOOR -j RETURN\nCOMMIT\n" },
  { name: "a new nat chain, no rule", input: "*nat\n:KPNG-FLOOR-EMPTY - [0:0]\nCOMMIT\n" },
  { name: "one rule in a new filter chain", input: "*filter\n:KPNG-FLOOR - [0:0]\n-A KPNG-FLOOR -j RETURN\nCOMMIT\n" },
];

/** `input` fed `repeats` times (each is idempotent): spreads of the wall to the marker and to the exit, and of the CPU. */
async function repeated(ns: string, command: string, input: string) {
  const runs = [];
  for (let i = 0; i < repeats; i++) runs.push(await feed(ns, command, input));
  return `to the marker ${spread(runs.map((c) => c.marked))}, to the exit ${spread(runs.map((c) => c.wall))}, CPU ${spread(runs.map((c) => c.cpu))}`;
}

/** The first restore's input (after the hairpin set it matches), then the one-change input and the floors `repeats` times each, fed by hand in a fresh namespace. */
async function byHand(command: string, set: string, first: string, one: string) {
  const ns = await newNs();
  try {
    if (set) await spawnExecutor(["ip", "netns", "exec", ns]).run(["ipset", "restore"], set);
    const listeners = await quietNft(60_000);
    const full = await feed(ns, command, first);
    console.log(
      `  by hand, ${command}: first ${ms(full.wall)} (CPU ${ms(full.cpu)}${listeners ? `; ${listeners} nftables listeners on the host: an event built per rule` : ""}); one endpoint added: ${await repeated(ns, command, one)}`,
    );
    for (const f of floors) console.log(`    floor, ${f.name}: ${await repeated(ns, command, f.input)}`);
  } finally {
    await sh(["ip", "netns", "del", ns]);
  }
}

async function runSize(n: number) {
  const ns = await newNs();
  const inputs: string[] = [];
  let firstSet = "";
  try {
    const inner = spawnExecutor(["ip", "netns", "exec", ns]);
    let restoreMs = 0;
    // As deployed (restores streamed, settled at their marker), timing the restores and keeping their inputs without the marker.
    const watched = async (argv: string[], go: () => Promise<string>, input: () => string) => {
      const t = performance.now();
      try {
        return await go();
      } finally {
        if (argv[0].endsWith("-restore") && argv.includes("--noflush")) {
          restoreMs += performance.now() - t;
          inputs.push(input().replace(`${restoredMarker}\n`, ""));
        }
        if (argv[0] === "ipset" && !firstSet) firstSet = input();
      }
    };
    const exec: Executor = {
      run: (argv, stdin, opts) =>
        watched(
          argv,
          () => inner.run(argv, stdin, opts),
          () => stdin ?? "",
        ),
      stream(argv, chunks, opts) {
        const seen: string[] = [];
        const kept = function* () {
          for (const c of chunks) yield typeof c === "string" ? (seen.push(c), c) : c.then((t) => (seen.push(t), t));
        };
        return watched(
          argv,
          () => inner.stream(argv, kept(), opts),
          () => seen.join(""),
        );
      },
    };
    const config = defaultConfig({ nodeName: "node0", nodeIPs: [v4.node(0)], clusterCIDRs: [plan.v4.clusterCIDR] });
    let clock = 0;
    const b = new IptablesBackend(
      { config, log: createLogger("bench", { level: "warn" }), out: () => {} },
      { executor: exec, families: ["v4"], monitorPeriodMs: 0, now: () => clock },
    );
    let k = 0;
    for (let i = 0; i < n; i++) {
      b.setService(service(i));
      for (let e = 0; e < endpointsPer; e++) b.setEndpoint("bench", `svc-${i}`, `ep-${e}`, endpoint(k++));
    }
    let t0 = performance.now();
    await b.sync();
    const full = b.lastSync!;
    console.log(
      `${n} svc x ${endpointsPer} ep, first full restore: ${ms(performance.now() - t0)} wall (iptables-restore ${ms(restoreMs)}), input ${kb(full.bytes.v4 ?? 0)}`,
    );

    // One endpoint added to a different service each time.
    const walls: number[] = [];
    let bytes = 0;
    for (let i = 0; i < repeats; i++) {
      const target = Math.floor(n / 2) + i;
      b.setEndpoint("bench", `svc-${target}`, "ep-new", endpoint(k++));
      t0 = performance.now();
      await b.sync();
      walls.push(performance.now() - t0);
      bytes = b.lastSync!.bytes.v4 ?? 0;
      if (b.lastSync!.full) throw new Error("expected a partial restore");
    }
    console.log(`${n} svc, one endpoint added (${repeats} services in turn): ${spread(walls)} wall, input ${bytes} bytes`);

    const target = Math.floor(n / 2);
    restoreMs = 0;
    b.deleteEndpoint("bench", `svc-${target}`, "ep-0");
    t0 = performance.now();
    await b.sync();
    console.log(
      `${n} svc, one endpoint removed: ${ms(performance.now() - t0)} wall (iptables-restore ${ms(restoreMs)}), input ${b.lastSync!.bytes.v4 ?? 0} bytes`,
    );

    // The periodic (hourly) full restore over the programmed state: iptables-save first, then everything.
    clock += 3_600_000;
    restoreMs = 0;
    t0 = performance.now();
    await b.sync();
    console.log(
      `${n} svc, periodic full restore over existing rules: ${ms(performance.now() - t0)} wall (iptables-restore ${ms(restoreMs)})`,
    );

    t0 = performance.now();
    await b.checkCanaries();
    console.log(`${n} svc, canary check (3 tables): ${ms(performance.now() - t0)}`);
  } finally {
    await sh(["ip", "netns", "del", ns]);
  }
  // inputs[0]: the first full restore, inputs[1]: the first added endpoint.
  console.log(`${n} svc, the same inputs fed by hand (fresh namespace; the first restore, then the change ${repeats} times):`);
  for (const command of ["iptables-nft-restore", "iptables-legacy-restore"]) {
    if (Bun.which(command)) await byHand(command, firstSet, inputs[0], inputs[1]);
  }
}

export default async function () {
  const version = await new Response(Bun.spawn(["iptables-restore", "--version"], { stdout: "pipe" }).stdout).text();
  console.log(`${version.trim()}; load ${(await Bun.file("/proc/loadavg").text()).split(" ").slice(0, 3).join(" ")}`);
  for (const n of sizes) await runSize(n);
}
