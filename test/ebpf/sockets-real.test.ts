// The eBPF backend on the real kernel: programs attached to a cgroup of the
// test's own (test/ebpf/sandbox.ts), maps pinned on a bpffs of its own,
// clients in the node network namespace joined to that cgroup, real servers
// in pod namespaces. Each case checks what a client process sees: who
// answered, which error connect() gave, which peer address it reports.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { closeSync, existsSync, readdirSync, readFileSync, renameSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { createEbpfBackend, type EbpfBackend } from "../../plugins/ebpf/index.ts";
import { cstr, libbpf } from "../../plugins/ebpf/libbpf.ts";
import { backendKeyBytes, backendOf, frontKeyBytes } from "../../plugins/ebpf/maps.ts";
import { ptr } from "bun:ffi";
import { HOOKS } from "../../plugins/ebpf/names.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { createLogger } from "../../src/core/log.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { endpoint, entry, nextState, nodeState, service } from "../fixtures/state.ts";
import { createTopology, type Probe, type Topology } from "../harness/netns.ts";
import { createSandbox, type Sandbox } from "./sandbox.ts";

let topo: Topology;
let sb: Sandbox;
let backend: EbpfBackend;
let state: NodeState;

const ip = {
  web4: v4.clusterIP(20),
  web6: v6.clusterIP(20),
  empty: v4.clusterIP(21),
  localEmpty: v4.clusterIP(22),
  sticky: v4.clusterIP(23),
  np: v4.clusterIP(24),
};
const NODE_PORT = 30080;

/** the id of the program a pinned link runs (the link's fdinfo) */
function progIdOf(hook: string): number {
  const fd = libbpf().bpf_obj_get(cstr(join(sb.pinDir, `link_${hook}`)));
  if (fd < 0) return -1;
  try {
    return Number(/prog_id:\s+(\d+)/.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1] ?? -1);
  } finally {
    closeSync(fd);
  }
}

const backendFor = () =>
  createEbpfBackend(
    {
      config: defaultConfig({ nodeIPs: [topo.node.v4, topo.node.v6], ebpf: { cgroup: sb.cgroup, pinDir: sb.pinDir } }),
      log: createLogger("test", { level: "error" }),
      out: () => {},
    },
    { nft: null },
  );

const pods = (...i: number[]) =>
  Object.fromEntries(i.map((n) => [`pod${n}`, endpoint({ ips: [topo.pods[n].v4, topo.pods[n].v6], local: true })]));
const http = { name: "http", port: 80, targetPort: 8080 };
const web = (...i: number[]) =>
  entry(
    service({ name: "web", clusterIPs: [ip.web4, ip.web6], ports: [http, { name: "dns", protocol: "UDP", port: 53, targetPort: 5353 }] }),
    pods(...i),
  );

beforeAll(async () => {
  topo = await createTopology({ pods: 3, prefix: "kpeb" });
  sb = await createSandbox();
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080], udp: [5353] });
  state = nodeState({
    nodeName: "node0",
    entries: [
      web(0, 1),
      entry(service({ name: "empty", clusterIPs: [ip.empty], ports: [http] })),
      entry(service({ name: "local-empty", clusterIPs: [ip.localEmpty], ports: [http], iTPLocal: true })),
      entry(service({ name: "sticky", clusterIPs: [ip.sticky], ports: [http], affinitySeconds: 60 }), pods(0, 1, 2)),
      entry(service({ name: "np", clusterIPs: [ip.np], ports: [{ ...http, nodePort: NODE_PORT }] }), pods(2)),
    ],
  });
  backend = await backendFor();
  await backend.setup();
  await backend.apply(state, null);
}, 60_000);
afterAll(async () => {
  await sb?.destroy();
  await topo?.destroy();
});

const tcp = (ip: string, port = 80): Probe => ({ ip, port, proto: "tcp", timeout: 2 });
const whos = async (probes: Probe[]) => (await sb.probeMany(topo.node.ns, probes)).map((r) => (r.ok ? r.who : r.error));

describe("socket-level load balancing", () => {
  test("the programs were loaded and attached to the test cgroup, maps pinned", () => {
    expect(backend.loaded).toBe(true);
    for (const f of ["link_connect4", "link_recvmsg6", "kpng_front", "kpng_affinity"]) expect(existsSync(join(sb.pinDir, f))).toBe(true);
  });

  test("a process in the cgroup reaches the service's pods: TCP and UDP, IPv4 and IPv6", async () => {
    const probes = [
      tcp(ip.web4),
      tcp(ip.web6),
      { ip: ip.web4, port: 53, proto: "udp" as const, timeout: 2 },
      { ip: ip.web6, port: 53, proto: "udp" as const, timeout: 2 },
    ];
    const got = await whos([...probes, ...probes, ...probes]);
    expect(got.every((w) => w === "pod0" || w === "pod1")).toBe(true);
  });

  test("connections spread over the endpoints", async () => {
    const got = new Set(await whos(Array.from({ length: 24 }, () => tcp(ip.web4))));
    expect([...got].sort()).toEqual(["pod0", "pod1"]);
  });

  test("an unconnected UDP socket's datagrams to a service all go to one endpoint, as a conntrack flow keeps them", async () => {
    const out = await sb.python(
      topo.node.ns,
      `
u = __import__("socket").socket(__import__("socket").AF_INET, __import__("socket").SOCK_DGRAM); u.settimeout(2)
who = set()
for _ in range(16):
    u.sendto(b"hi\\n", (${JSON.stringify(ip.web4)}, 53))
    who.add(u.recvfrom(2048)[0].decode().split()[0])
print(" ".join(sorted(who)))
`,
    );
    expect(out.trim()).toMatch(/^pod[01]$/);
  });

  test("a process outside the cgroup is not steered (its packets go where routing sends them)", async () => {
    const r = await topo.probe(topo.node.ns, { ...tcp(ip.web4), timeout: 0.5 });
    expect(r.ok).toBe(false);
  });

  test("a service without endpoints is refused (ECONNREFUSED); iTP=Local without endpoints fails with EPERM", async () => {
    const [empty, local] = await sb.probeMany(topo.node.ns, [tcp(ip.empty), tcp(ip.localEmpty)]);
    expect(empty).toMatchObject({ ok: false, error: "refused" });
    expect(local).toMatchObject({ ok: false, error: "unreachable" });
    expect(local.ok ? "" : local.detail).toContain("Operation not permitted");
  });

  test("the node's own node port reaches the endpoint", async () => {
    expect(await whos([tcp(topo.node.v4, NODE_PORT), tcp(ip.np)])).toEqual(["pod2", "pod2"]);
  });

  test("ClientIP affinity: every connection of the client goes to one endpoint", async () => {
    const got = await whos(Array.from({ length: 12 }, () => tcp(ip.sticky)));
    expect(new Set(got).size).toBe(1);
    expect(got[0]).toMatch(/^pod[012]$/);
  });

  test("ClientIP affinity: an entry within the timeout is followed, an expired one is not (entries written by hand)", async () => {
    const lib = libbpf();
    const fd = (m: string) => lib.bpf_obj_get(cstr(join(sb.pinDir, m)));
    const [front, backends, affinity] = [fd("kpng_front"), fd("kpng_backend"), fd("kpng_affinity")];
    try {
      const gid = new Uint32Array(1);
      expect(lib.bpf_map_lookup_elem(front, ptr(frontKeyBytes({ family: 4, addr: ip.sticky, port: 80, proto: 6 })), ptr(gid))).toBe(0);
      // CLOCK_MONOTONIC, bpf_ktime_get_ns's clock (Bun's hrtime has another origin): its offset from hrtime, measured once
      const monoOffset =
        BigInt((await sb.python(topo.node.ns, "import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC))")).trim()) -
        process.hrtime.bigint();
      const cookie = BigInt(
        (
          await sb.python(
            topo.node.ns,
            "import socket; print(int.from_bytes(socket.socket().getsockopt(socket.SOL_SOCKET, 71, 8), 'little'))",
          )
        ).trim(),
      );
      const slotPod = async (slot: number) => {
        const v = new Uint8Array(20);
        expect(lib.bpf_map_lookup_elem(backends, ptr(backendKeyBytes(gid[0], slot)), ptr(v))).toBe(0);
        return { value: v, pod: `pod${topo.pods.findIndex((p) => p.v4 === backendOf(v).addr)}` };
      };
      /** writes the client's affinity entry: slot `slot`, last used `ageS` seconds ago */
      const remember = async (slot: number, ageS: number) => {
        const key = new Uint8Array(16);
        const kv = new DataView(key.buffer);
        kv.setBigUint64(0, cookie, true);
        kv.setUint32(8, gid[0], true);
        const val = new Uint8Array(40);
        const vv = new DataView(val.buffer);
        vv.setBigUint64(0, process.hrtime.bigint() + monoOffset - BigInt(ageS) * 1_000_000_000n, true);
        vv.setUint32(8, slot, true);
        val.set((await slotPod(slot)).value, 16);
        expect(lib.bpf_map_update_elem(affinity, ptr(key), ptr(val), 0)).toBe(0);
      };
      for (const slot of [0, 1, 2]) {
        await remember(slot, 30); // the timeout is 60 s
        expect(await whos([tcp(ip.sticky)])).toEqual([(await slotPod(slot)).pod]);
      }
      // expired: a fresh pick each time (all 10 on slot 0's pod by chance: (1/3)^10)
      const got: string[] = [];
      for (let i = 0; i < 10; i++) {
        await remember(0, 61);
        got.push(...(await whos([tcp(ip.sticky)])));
      }
      expect(new Set(got).size).toBeGreaterThan(1);
    } finally {
      for (const f of [front, backends, affinity]) closeSync(f);
    }
  }, 30_000);

  test("ClientIP affinity whose endpoint goes away: the client moves to one of the others and stays there", async () => {
    const [was] = await whos([tcp(ip.sticky)]);
    const rest = [0, 1, 2].filter((i) => `pod${i}` !== was);
    const sticky = (...i: number[]) =>
      entry(service({ name: "sticky", clusterIPs: [ip.sticky], ports: [http], affinitySeconds: 60 }), pods(...i));
    const next = nextState(state, { set: [sticky(...rest)] });
    await backend.apply(next.state, next.change);
    const got = await whos(Array.from({ length: 12 }, () => tcp(ip.sticky)));
    expect(new Set(got).size).toBe(1);
    expect(rest.map((i) => `pod${i}`)).toContain(got[0]);
    const back = nextState(next.state, { set: [sticky(0, 1, 2)] });
    await backend.apply(back.state, back.change);
    state = back.state;
  });

  test("an IPv6 socket reaching the IPv4 cluster IP as ::ffff:a.b.c.d is balanced too, its peer the address it asked for", async () => {
    const out = await sb.python(
      topo.node.ns,
      `
import socket, json
t = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); t.settimeout(2)
t.connect(("::ffff:${ip.web4}", 80))
peer = t.getpeername()[0]
t.send(b"hi\\n")
print(json.dumps({"peer": peer, "who": t.recv(100).decode().split()[0]}))
`,
    );
    const got = JSON.parse(out);
    expect(got.peer).toBe(`::ffff:${ip.web4}`);
    expect(["pod0", "pod1", "pod2"]).toContain(got.who);
  });

  test("UDP replies come from the service address; getpeername() shows it too", async () => {
    const out = await sb.python(
      topo.node.ns,
      `
import socket, json
res = {}
for fam, addr in ((socket.AF_INET, ${JSON.stringify(ip.web4)}), (socket.AF_INET6, ${JSON.stringify(ip.web6)})):
    u = socket.socket(fam, socket.SOCK_DGRAM); u.settimeout(2)
    u.sendto(b"hi\\n", (addr, 53))
    data, peer = u.recvfrom(2048)
    t = socket.socket(fam, socket.SOCK_STREAM); t.settimeout(2)
    t.connect((addr, 80))
    res[addr] = {"udpFrom": list(peer[:2]), "tcpPeer": list(t.getpeername()[:2]), "who": data.decode().split()[0]}
print(json.dumps(res))
`,
    );
    const res = JSON.parse(out);
    expect(res[ip.web4]).toMatchObject({ udpFrom: [ip.web4, 53], tcpPeer: [ip.web4, 80] });
    expect(res[ip.web6]).toMatchObject({ udpFrom: [ip.web6, 53], tcpPeer: [ip.web6, 80] });
  });

  test("an endpoint change: the next connect reaches the new endpoint, the programs stay", async () => {
    const next = nextState(state, { set: [web(2)] });
    await backend.apply(next.state, next.change);
    state = next.state;
    // one slot written, one count written, one slot deleted (2 endpoints -> 1)
    expect(backend.last).toMatchObject({ full: false });
    expect(await whos(Array.from({ length: 8 }, () => tcp(ip.web4)))).toEqual(Array(8).fill("pod2"));
  });
});

describe("restart and cleanup", () => {
  test("pins removed by someone else (the hooks detach): reported, and the full sync that answers attaches again", async () => {
    const watched = await createEbpfBackend(
      {
        config: defaultConfig({ nodeIPs: [topo.node.v4, topo.node.v6], ebpf: { cgroup: sb.cgroup, pinDir: sb.pinDir } }),
        log: createLogger("test", { level: "error" }),
        out: () => {},
      },
      { nft: null, pinCheckMs: 100 },
    );
    await watched.setup();
    const reports: string[] = [];
    watched.watchRules((r) => void reports.push(r));
    await watched.apply(state, null);
    unlinkSync(join(sb.pinDir, "link_connect4"));
    unlinkSync(join(sb.pinDir, "kpng_backend"));
    for (let i = 0; i < 100 && !reports.length; i++) await Bun.sleep(50);
    expect(reports).toEqual([`ebpf: pinned programs or maps removed from ${sb.pinDir}`]);
    expect(await whos([{ ...tcp(ip.web4), timeout: 0.5 }])).toEqual(["timeout"]);
    await watched.apply(state, null);
    expect(watched.last?.full).toBe(true);
    expect(await whos([tcp(ip.web4), tcp(ip.web6)])).toEqual(["pod2", "pod2"]);
    await watched.close();
    backend = watched;
  }, 30_000);

  test("a new kpng finds the programs attached: loads nothing, rewrites nothing, no connection fails meanwhile", async () => {
    const loop = await sb.probeLoop(topo.node.ns, [tcp(ip.web4), tcp(ip.sticky)]);
    await Bun.sleep(300);
    // the old instance is dropped as a killed process leaves it: nothing closed, nothing removed
    const again = await backendFor();
    await again.setup();
    await again.apply(state, null);
    await Bun.sleep(300);
    const run = await loop.stop();
    expect({ loaded: again.loaded, ops: again.last?.ops, failed: run.failed }).toEqual({ loaded: false, ops: 0, failed: 0 });
    expect(run.connections).toBeGreaterThan(10);
    backend = again;
  }, 30_000);

  test("a kpng with another BPF object (an upgrade) swaps the programs under the pinned links: the hooks never detach", async () => {
    const before = HOOKS.map((h) => progIdOf(h));
    // the marker names the object the links run: make it another one's
    const marker = readdirSync(sb.pinDir).find((m) => m.startsWith("obj_"))!;
    renameSync(join(sb.pinDir, marker), join(sb.pinDir, "obj_0000000000000000"));
    const loop = await sb.probeLoop(topo.node.ns, [tcp(ip.web4), { ip: ip.web6, port: 53, proto: "udp", timeout: 2 }]);
    const upgraded = await backendFor();
    await upgraded.setup();
    await upgraded.apply(state, null);
    await Bun.sleep(300);
    const run = await loop.stop();
    const after = HOOKS.map((h) => progIdOf(h));
    expect({ loaded: upgraded.loaded, ops: upgraded.last?.ops, failed: run.failed }).toEqual({ loaded: true, ops: 0, failed: 0 });
    expect(after.every((id, i) => id > 0 && id !== before[i])).toBe(true);
    expect(readdirSync(sb.pinDir).filter((m) => m.startsWith("obj_"))).toEqual([marker]);
    backend = upgraded;
  }, 30_000);

  test("--cleanup unpins everything: the hooks detach and connects are no longer steered", async () => {
    await backend.cleanup();
    expect(existsSync(sb.pinDir)).toBe(false);
    const [r] = await sb.probeMany(topo.node.ns, [{ ...tcp(ip.empty), timeout: 0.5 }]);
    expect(r).toMatchObject({ ok: false, error: "timeout" });
  });
});
