// The eBPF backend without a kernel: what the renderer asks of the maps
// (golden lines), how many writes a change costs (O(change)), that ids and
// slots stick, and that a restarted planner adopts what the maps hold.

import { describe, expect, test } from "bun:test";
import { createEbpfBackend } from "../../plugins/ebpf/index.ts";
import { assignSlots, MapPlanner } from "../../plugins/ebpf/plan.ts";
import { addrBytes, addrText, backendBytes, backendOf, frontKeyBytes, frontKeyOf, printOp, type MapOp } from "../../plugins/ebpf/maps.ts";
import { runsOf, type MapContents, type MapWriter } from "../../plugins/ebpf/executor.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { createLogger } from "../../src/core/log.ts";
import { endpoint as ep, entry, nextState, nodeState, service as svc, serviceKey } from "../fixtures/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";

const NODE = [v4.node(0), v6.node(0)];
const cip4 = v4.clusterIP(10);
const cip6 = v6.clusterIP(10);
const pod = (i: number) => v4.pod(0, i);
const pod6 = (i: number) => v6.pod(0, i);

const lines = (ops: MapOp[]) => ops.map(printOp);
const plan1 = (entries: ReturnType<typeof entry>[]) => new MapPlanner().plan(nodeState({ nodeName: "n", entries }), null, NODE);

describe("render: what the maps hold for a service", () => {
  const cases: { name: string; entries: ReturnType<typeof entry>[]; want: string[] }[] = [
    {
      name: "ClusterIP, two endpoints: one group, its slots, one frontend",
      entries: [
        entry(svc({ name: "web", clusterIPs: [cip4], ports: [{ port: 80, targetPort: 8080 }] }), {
          a: ep({ ips: [pod(2)] }),
          b: ep({ ips: [pod(1)] }),
        }),
      ],
      want: [
        `update kpng_backend 1/0 ${pod(1)} port=8080`,
        `update kpng_backend 1/1 ${pod(2)} port=8080`,
        "update kpng_group 1 count=2 affinity=0 flags=0",
        `update kpng_front ${cip4}:80/tcp group=1`,
      ],
    },
    {
      name: "no endpoints: a group of 0 (refused); iTP=Local: flagged drop",
      entries: [
        entry(svc({ name: "a", clusterIPs: [cip4], ports: [{ port: 80 }] })),
        entry(svc({ name: "b", clusterIPs: [v4.clusterIP(11)], ports: [{ port: 80 }], iTPLocal: true })),
      ],
      want: [
        "update kpng_group 1 count=0 affinity=0 flags=0",
        "update kpng_group 2 count=0 affinity=0 flags=1",
        `update kpng_front ${cip4}:80/tcp group=1`,
        `update kpng_front ${v4.clusterIP(11)}:80/tcp group=2`,
      ],
    },
    {
      name: "NodePort + external IP: an external group on the node IP and the external IP; dual-stack families apart",
      entries: [
        entry(
          svc({
            name: "np",
            clusterIPs: [cip4, cip6],
            externalIPs: [v4.external(1)],
            ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 30053 }],
          }),
          {
            p: ep({ ips: [pod(1)], internal: true, external: false }),
            q: ep({ ips: [pod(2)], internal: false, external: true }),
            r: ep({ ips: [pod6(1)] }),
          },
        ),
      ],
      want: [
        `update kpng_backend 1/0 ${pod(1)} port=53`,
        `update kpng_backend 2/0 ${pod(2)} port=53`,
        `update kpng_backend 3/0 ${pod6(1)} port=53`,
        `update kpng_backend 4/0 ${pod6(1)} port=53`,
        "update kpng_group 1 count=1 affinity=0 flags=0",
        "update kpng_group 2 count=1 affinity=0 flags=0",
        "update kpng_group 3 count=1 affinity=0 flags=0",
        "update kpng_group 4 count=1 affinity=0 flags=0",
        `update kpng_front ${cip4}:53/udp group=1`,
        `update kpng_front ${v4.external(1)}:53/udp group=2`,
        `update kpng_front ${v4.node(0)}:30053/udp group=2`,
        `update kpng_front [${cip6}]:53/udp group=3`,
        `update kpng_front [${v6.node(0)}]:30053/udp group=4`,
      ],
    },
    {
      name: "eTP=Local with an internal endpoint: node-local clients of the external frontends short-circuit to the internal endpoints",
      entries: [
        entry(
          svc({ name: "lb", clusterIPs: [cip4], lbIPs: [v4.external(2)], ports: [{ port: 80 }], eTPLocal: true, affinitySeconds: 30 }),
          {
            remote: ep({ ips: [pod(3)], internal: true, external: false }),
          },
        ),
      ],
      want: [
        `update kpng_backend 1/0 ${pod(3)} port=80`,
        `update kpng_backend 2/0 ${pod(3)} port=80`,
        "update kpng_group 1 count=1 affinity=30 flags=0",
        "update kpng_group 2 count=1 affinity=30 flags=1",
        `update kpng_front ${cip4}:80/tcp group=1`,
        `update kpng_front ${v4.external(2)}:80/tcp group=2`,
      ],
    },
    {
      name: "named target port per endpoint; duplicates and endpoints without a usable port left out",
      entries: [
        entry(svc({ name: "named", clusterIPs: [cip4], ports: [{ name: "http", port: 80 }] }), {
          a: ep({ ips: [pod(1)], ports: { http: 9001 } }),
          b: ep({ ips: [pod(1)], ports: { http: 9001 } }),
          c: ep({ ips: [pod(2)], ports: { http: 70000 } }),
        }),
      ],
      want: [
        `update kpng_backend 1/0 ${pod(1)} port=9001`,
        "update kpng_group 1 count=1 affinity=0 flags=0",
        `update kpng_front ${cip4}:80/tcp group=1`,
      ],
    },
  ];
  for (const c of cases) test(c.name, () => expect(lines(plan1(c.entries))).toEqual(c.want));
});

describe("plan: a change costs what changed", () => {
  const web = (eps: number[]) =>
    entry(
      svc({ name: "web", clusterIPs: [cip4], ports: [{ port: 80 }] }),
      Object.fromEntries(eps.map((i) => [`p${i}`, ep({ ips: [pod(i)] })])),
    );
  const others = Array.from({ length: 50 }, (_, i) =>
    entry(svc({ name: `s${i}`, clusterIPs: [v4.clusterIP(100 + i)], ports: [{ port: 80 }] }), { a: ep({ ips: [pod(200)] }) }),
  );

  test("one endpoint added among 51 services: 1 slot + 1 group count", () => {
    const p = new MapPlanner();
    const s1 = nodeState({ nodeName: "n", entries: [web([1, 2]), ...others] });
    p.plan(s1, null, NODE);
    const { state, change } = nextState(s1, { set: [web([1, 2, 3])] });
    expect(lines(p.plan(state, change, NODE))).toEqual([
      `update kpng_backend 1/2 ${pod(3)} port=80`,
      "update kpng_group 1 count=3 affinity=0 flags=0",
    ]);
  });

  test("one endpoint removed: the last one moves into its slot, the last slot goes; the others keep theirs (affinity holds)", () => {
    const p = new MapPlanner();
    const s1 = nodeState({ nodeName: "n", entries: [web([1, 2, 3])] });
    p.plan(s1, null, NODE);
    const { state, change } = nextState(s1, { set: [web([2, 3])] });
    expect(lines(p.plan(state, change, NODE))).toEqual([
      `update kpng_backend 1/0 ${pod(3)} port=80`,
      "update kpng_group 1 count=2 affinity=0 flags=0",
      "delete kpng_backend 1/2",
    ]);
  });

  test("service deleted: frontend, then group, then slots; its id is reused only by a later sync", () => {
    const p = new MapPlanner();
    const s1 = nodeState({ nodeName: "n", entries: [web([1])] });
    p.plan(s1, null, NODE);
    const gone = nextState(s1, { remove: ["default/web"] });
    expect(lines(p.plan(gone.state, gone.change, NODE))).toEqual([
      `delete kpng_front ${cip4}:80/tcp`,
      "delete kpng_group 1",
      "delete kpng_backend 1/0",
    ]);
    const back = nextState(gone.state, { set: [web([2])] });
    expect(lines(p.plan(back.state, back.change, NODE))).toContain("update kpng_group 1 count=1 affinity=0 flags=0");
  });

  test("nothing changed: a full sync writes nothing", () => {
    const p = new MapPlanner();
    const s1 = nodeState({ nodeName: "n", entries: [web([1, 2]), ...others] });
    p.plan(s1, null, NODE);
    expect(p.plan(s1, null, NODE)).toEqual([]);
  });

  test("a new process adopts the ids in the maps: same state, no write; what no service owns is deleted", () => {
    const first = new MapPlanner();
    const s1 = nodeState({ nodeName: "n", entries: [web([1, 2]), ...others] });
    const kernel = contentsOf(first.plan(s1, null, NODE));
    // an entry left by a service deleted while no kpng ran
    kernel.front.push({ key: { family: 4, addr: v4.clusterIP(999), port: 80, proto: 6 }, group: 9999 });
    kernel.group.set(9999, { count: 1, affinity: 0, flags: 0 });
    kernel.backend.push({ id: 9999, slot: 0, value: { addr: pod(9), port: 80 } });
    const restarted = new MapPlanner();
    restarted.load(kernel);
    expect(lines(restarted.plan(s1, null, NODE))).toEqual([
      `delete kpng_front ${v4.clusterIP(999)}:80/tcp`,
      "delete kpng_group 9999",
      "delete kpng_backend 9999/0",
    ]);
  });
});

/** what the maps hold after `ops` on empty maps */
function contentsOf(ops: MapOp[]): MapContents {
  const c: MapContents = { front: [], group: new Map(), backend: [] };
  for (const o of ops) {
    if (o.op !== "update") continue;
    if (o.map === "kpng_front") c.front.push({ key: o.key, group: o.group });
    else if (o.map === "kpng_group") c.group.set(o.id, o.value);
    else c.backend.push({ id: o.id, slot: o.slot, value: o.value });
  }
  return c;
}

test("addresses read back in RFC 5952 form match the state's own spelling: a restart writes nothing", () => {
  const spelled = "2001:db8:2:0::2"; // as an API server may hold it
  const s1 = nodeState({
    nodeName: "n",
    entries: [entry(svc({ name: "v6", clusterIPs: ["2001:db8:1:0::a"], ports: [{ port: 80 }] }), { a: ep({ ips: [spelled] }) })],
  });
  const ops = new MapPlanner().plan(s1, null, NODE);
  const kernel = contentsOf(ops);
  // what the writer's dump gives back
  kernel.front = kernel.front.map((f) => ({ ...f, key: frontKeyOf(frontKeyBytes(f.key)) }));
  kernel.backend = kernel.backend.map((b) => ({ ...b, value: backendOf(backendBytes(b.value)) }));
  expect(kernel.backend[0].value.addr).toBe("2001:db8:2::2");
  const restarted = new MapPlanner();
  restarted.load(kernel);
  expect(restarted.plan(s1, null, NODE)).toEqual([]);
});

describe("slots", () => {
  const b = (i: number) => ({ addr: pod(i), port: 80 });
  test.each([
    ["kept in place", [b(1), b(2)], [b(1), b(2)], [b(1), b(2)]],
    ["a new one fills the hole", [b(1), b(2), b(3)], [b(1), b(3), b(4)], [b(1), b(4), b(3)]],
    ["one past the new count moves down", [b(1), b(2), b(3)], [b(1), b(3)], [b(1), b(3)]],
    [
      "another spelling of the same address keeps its slot",
      [{ addr: "2001:db8:2::1", port: 80 }, b(1)],
      [b(2), { addr: "2001:db8:2:0::1", port: 80 }],
      [{ addr: "2001:db8:2::1", port: 80 }, b(2)],
    ],
  ] as const)("%s", (_n, prev, next, want) => expect(assignSlots(prev, next)).toEqual([...want]));
});

describe("bytes", () => {
  test.each([
    [{ family: 4 as const, addr: "198.18.0.10", port: 80, proto: 6 }],
    [{ family: 6 as const, addr: "2001:db8:1::a", port: 53, proto: 17 }],
    [{ family: 6 as const, addr: "::ffff:198.18.0.1", port: 1, proto: 132 }],
  ])("front key %o round-trips", (k) =>
    expect(frontKeyOf(frontKeyBytes(k))).toEqual({ ...k, addr: k.addr === "::ffff:198.18.0.1" ? "::ffff:c612:1" : k.addr }),
  );
  test("layout: address bytes, port in network order, proto, family", () => {
    expect([...frontKeyBytes({ family: 4, addr: "198.18.0.10", port: 8080, proto: 6 })]).toEqual([
      198,
      18,
      0,
      10,
      ...Array(12).fill(0),
      0x1f,
      0x90,
      6,
      4,
    ]);
  });
  test.each([
    ["::", "::"],
    ["2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1"],
    ["2001:0:0:1:0:0:0:1", "2001:0:0:1::1"],
    ["1:0:3:4:5:6:7:8", "1:0:3:4:5:6:7:8"],
    ["fe80:0::1:0:0:0", "fe80::1:0:0:0"],
    ["2001:DB8::A", "2001:db8::a"],
  ])("IPv6 read back as RFC 5952 text: %s -> %s", (spelled, text) => {
    const b = new Uint8Array(16);
    addrBytes(spelled, b, 0);
    expect(addrText(b, 6)).toBe(text);
  });
  test("an endpoint carries its family", () =>
    expect(backendOf(backendBytes({ addr: "2001:db8:2::1", port: 80 }))).toEqual({ addr: "2001:db8:2::1", port: 80 }));
  test("writes are batched per map and verb", () => {
    const ops = plan1([
      entry(svc({ name: "w", clusterIPs: [cip4, cip6], ports: [{ port: 80 }] }), {
        a: ep({ ips: [pod(1), pod6(1)] }),
        b: ep({ ips: [pod(2)] }),
      }),
    ]);
    expect(runsOf(ops).map((r) => `${r[0].op} ${r[0].map} x${r.length}`)).toEqual([
      "update kpng_backend x3",
      "update kpng_group x2",
      "update kpng_front x2",
    ]);
  });
});

describe("backend", () => {
  const ctx = (dryRun: boolean) => {
    const out: string[] = [];
    return {
      out,
      ctx: {
        config: defaultConfig({ dryRun, nodeIPs: NODE }),
        log: createLogger("test", { level: "error" }),
        out: (t: string) => void out.push(t),
      },
    };
  };
  test("--dry-run prints the map writes", async () => {
    const { out, ctx: c } = ctx(true);
    const b = await createEbpfBackend(c, { nft: null });
    await b.setup();
    await b.apply(nodeState({ nodeName: "n", entries: [entry(svc({ name: "w", clusterIPs: [cip4], ports: [{ port: 80 }] }))] }), null);
    expect(out.join("")).toBe(
      `# ebpf: map writes\nupdate kpng_group 1 count=0 affinity=0 flags=0\nupdate kpng_front ${cip4}:80/tcp group=1\n`,
    );
  });
  test("a failed write makes the next sync full, from what the maps hold", async () => {
    const { ctx: c } = ctx(false);
    let fail = true;
    let dumps = 0;
    const writer: MapWriter = {
      apply: async () => {
        if (fail) throw new Error("ENOMEM");
      },
      dump: async () => (dumps++, { front: [], group: new Map(), backend: [] }),
    };
    const b = await createEbpfBackend(c, { nft: null, writer });
    const s1 = nodeState({ nodeName: "n", entries: [entry(svc({ name: "w", clusterIPs: [cip4], ports: [{ port: 80 }] }))] });
    await expect(b.apply(s1, null)).rejects.toThrow("writing the maps failed: ENOMEM");
    fail = false;
    await b.apply(s1, new Set([serviceKey(s1.services.get("default/w")!.service)]));
    expect({ dumps, full: b.last?.full, ops: b.last?.ops }).toEqual({ dumps: 2, full: true, ops: 2 });
  });
});
