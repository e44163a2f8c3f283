// The userspace backend's pure parts: frontends from node-local state (by
// the brain's scopes), the endpoint picker (round-robin, ClientIP affinity
// and its timeout), the address batch of bind mode, the tables of redirect
// mode, and the backend's commands against a recorder (--dry-run included).

import { describe, expect, test } from "bun:test";
import { othersLocal, parseRoutes, routeBatch } from "../../plugins/userspace/local-routes.ts";
import { planFrontends, type Frontend } from "../../plugins/userspace/frontends.ts";
import { FrontendPlanner } from "../../plugins/userspace/plan.ts";
import { createUserspaceBackend } from "../../plugins/userspace/index.ts";
import { Picker } from "../../plugins/userspace/picker.ts";
import { renderRedirect } from "../../plugins/userspace/render-redirect.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { context, ep, entry, nodeConfig, nodeState, recorder, svc, type SvcSpec } from "../nft/fixtures.ts";

const cip = { v4: v4.clusterIP(10), v6: v6.clusterIP(10) };
const lb = v4.external(10);
const nodeIPs = [v4.node(0), v6.node(0)];
const pod = (i: number) => [v4.pod(0, i), v6.pod(0, i)];

const web = (over: Partial<SvcSpec> = {}): SvcSpec => ({
  name: "web",
  clusterIPs: [cip.v4, cip.v6],
  lbIPs: [lb],
  ports: [
    { name: "http", port: 80, nodePort: 30080 },
    { name: "dns", protocol: "UDP", port: 53 },
    { name: "sctp", protocol: "SCTP", port: 90 },
  ],
  ...over,
});

/** frontend key -> endpoints, for one state */
function plan(spec: SvcSpec, eps: Record<string, ReturnType<typeof ep>>) {
  const p = planFrontends(nodeState([entry(svc(spec), eps)]), { nodeIPs, clusterCIDRs: ["198.19.0.0/16", "2001:db8:2::/56"] });
  return { map: Object.fromEntries([...p.frontends].map(([k, f]) => [k, f.endpoints])), frontends: p.frontends, skipped: p.skipped };
}

describe("planFrontends", () => {
  const cases: Array<{ name: string; spec: SvcSpec; eps: Record<string, ReturnType<typeof ep>>; want: Record<string, string[]> }> = [
    {
      name: "cluster IPs per family, LB IP, node port per node IP; target ports by name",
      spec: web(),
      eps: { a: ep({ ips: pod(1), ports: { http: 8080, dns: 5353 } }) },
      want: {
        [`tcp/${cip.v4}/80`]: [`${v4.pod(0, 1)}:8080`],
        [`tcp/${cip.v6}/80`]: [`[${v6.pod(0, 1)}]:8080`],
        [`tcp/${lb}/80`]: [`${v4.pod(0, 1)}:8080`],
        [`tcp/${v4.node(0)}/30080`]: [`${v4.pod(0, 1)}:8080`],
        [`tcp/${v6.node(0)}/30080`]: [`[${v6.pod(0, 1)}]:8080`],
        [`udp/${cip.v4}/53`]: [`${v4.pod(0, 1)}:5353`],
        [`udp/${cip.v6}/53`]: [`[${v6.pod(0, 1)}]:5353`],
        [`udp/${lb}/53`]: [`${v4.pod(0, 1)}:5353`],
      },
    },
    {
      name: "scopes: Internal for cluster IPs, External for LB IPs and node ports",
      spec: web({ ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
      eps: {
        a: ep({ ips: [v4.pod(0, 1)], ports: { http: 8080 }, internal: true, external: false }),
        b: ep({ ips: [v4.pod(0, 2)], ports: { http: 8080 }, internal: false, external: true }),
      },
      want: {
        [`tcp/${cip.v4}/80`]: [`${v4.pod(0, 1)}:8080`],
        [`tcp/${cip.v6}/80`]: [],
        [`tcp/${lb}/80`]: [`${v4.pod(0, 2)}:8080`],
        [`tcp/${v4.node(0)}/30080`]: [`${v4.pod(0, 2)}:8080`],
        [`tcp/${v6.node(0)}/30080`]: [],
      },
    },
    {
      name: "single-stack IPv4 service: no node port on the IPv6 node IP",
      spec: web({ clusterIPs: [cip.v4], lbIPs: [], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
      eps: { a: ep({ ips: pod(1), ports: { http: 8080 } }) },
      want: { [`tcp/${cip.v4}/80`]: [`${v4.pod(0, 1)}:8080`], [`tcp/${v4.node(0)}/30080`]: [`${v4.pod(0, 1)}:8080`] },
    },
    {
      name: "no endpoints: frontends with an empty list (the node refuses them)",
      spec: web({ lbIPs: [], ports: [{ name: "http", port: 80 }] }),
      eps: {},
      want: { [`tcp/${cip.v4}/80`]: [], [`tcp/${cip.v6}/80`]: [] },
    },
    {
      name: "numeric target port; an endpoint listed twice counts once",
      spec: web({ lbIPs: [], clusterIPs: [cip.v4], ports: [{ name: "http", port: 80, targetPort: 9090 }] }),
      eps: { a: ep({ ips: [v4.pod(0, 1)] }), b: ep({ ips: [v4.pod(0, 1)] }) },
      want: { [`tcp/${cip.v4}/80`]: [`${v4.pod(0, 1)}:9090`] },
    },
  ];
  for (const c of cases) test(c.name, () => expect(plan(c.spec, c.eps).map).toEqual(c.want));

  test("SCTP ports are skipped with a reason", () => {
    expect(plan(web(), {}).skipped).toEqual([
      "default/web:sctp: protocol SCTP is not relayed (SCTP sockets are missing from this kernel and from Bun)",
    ]);
  });

  test("eTP=Local: external frontends carry the internal endpoints for pods (cluster CIDR of the family) and the node", () => {
    const { frontends } = plan(web({ eTPLocal: true, ports: [{ name: "http", port: 80, nodePort: 30080 }] }), {
      a: ep({ ips: [v4.pod(0, 2)], ports: { http: 8080 }, local: false, external: false }),
    });
    expect(frontends.get(`tcp/${lb}/80`)!.endpoints).toEqual([]);
    expect(frontends.get(`tcp/${lb}/80`)!.shortCircuit).toEqual({ from: ["198.19.0.0/16"], endpoints: [`${v4.pod(0, 2)}:8080`] });
    expect(frontends.get(`tcp/${v4.node(0)}/30080`)!.shortCircuit?.endpoints).toEqual([`${v4.pod(0, 2)}:8080`]);
    expect(frontends.get(`tcp/${cip.v4}/80`)!.shortCircuit).toBeUndefined();
  });

  test("affinity and source ranges reach the frontends they concern", () => {
    const { frontends } = plan(web({ affinitySeconds: 30, sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"] }), {});
    const f = (k: string) => frontends.get(k) as Frontend;
    expect(f(`tcp/${lb}/80`).sourceRanges).toEqual(["198.18.128.0/24"]);
    expect(f(`tcp/${cip.v4}/80`).sourceRanges).toBeUndefined();
    expect(f(`tcp/${cip.v4}/80`).affinitySeconds).toBe(30);
  });
});

describe("FrontendPlanner: the services a change names, re-planned against what was planned", () => {
  const opts = { nodeIPs, clusterCIDRs: ["198.19.0.0/16"] };
  const api = (eps: Record<string, ReturnType<typeof ep>>) =>
    entry(
      svc({
        name: "api",
        clusterIPs: [v4.clusterIP(11)],
        ports: [
          { name: "http", port: 80 },
          { name: "s", protocol: "SCTP", port: 90 },
        ],
      }),
      eps,
    );
  const one = { a: ep({ ips: [v4.pod(0, 1)], ports: { http: 8080 } }) };
  const two = { a: ep({ ips: [v4.pod(0, 2)], ports: { http: 8080 } }) };
  const webEntry = entry(svc({ name: "web", clusterIPs: [cip.v4], ports: [{ name: "http", port: 80 }] }), one);
  const keys = (m: Map<string, Frontend | undefined>) => [...m].map(([k, f]) => `${k}${f ? "" : " (gone)"}`).sort();

  test("full, partial, removal: only the named services are touched; service IPs counted; each skipped port reported once", () => {
    const p = new FrontendPlanner();
    // full: both services' frontends, the SCTP port skipped (Bun has no SCTP sockets)
    const full = p.plan(nodeState([webEntry, api(one)]), null, opts);
    expect(keys(full.touched)).toEqual([`tcp/${cip.v4}/80`, `tcp/${v4.clusterIP(11)}/80`]);
    expect(full.gone).toEqual([]);
    expect(full.skipped).toHaveLength(1);
    expect([...p.serviceIPs.keys()].sort()).toEqual([cip.v4, v4.clusterIP(11)].sort());
    expect(p.takeIPsChanged()).toBe(true);
    expect(p.takeIPsChanged()).toBe(false);
    expect(p.nodeIPs).toEqual(nodeIPs);

    // partial: api's endpoint changes; web is not touched, the skipped port is not reported again
    const partial = p.plan(nodeState([webEntry, api(two)]), new Set(["default/api"]), opts);
    expect(keys(partial.touched)).toEqual([`tcp/${v4.clusterIP(11)}/80`]);
    expect(partial.touched.get(`tcp/${v4.clusterIP(11)}/80`)?.endpoints).toEqual([`${v4.pod(0, 2)}:8080`]);
    expect(partial.gone).toEqual([]);
    expect(partial.skipped).toEqual([]);
    expect([...p.serviceIPs.keys()].sort()).toEqual([cip.v4, v4.clusterIP(11)].sort());
    p.takeIPsChanged(); // a re-planned service counts its IPs out and in again: bind mode re-syncs its routes (idempotent)

    // api removed: its frontend gone, its cluster IP no longer local
    const removed = p.plan(nodeState([webEntry]), new Set(["default/api"]), opts);
    expect(keys(removed.touched)).toEqual([`tcp/${v4.clusterIP(11)}/80 (gone)`]);
    expect(removed.gone.map((f) => f.key)).toEqual([`tcp/${v4.clusterIP(11)}/80`]);
    expect([...p.serviceIPs.keys()]).toEqual([cip.v4]);
    expect([...p.frontends.keys()]).toEqual([`tcp/${cip.v4}/80`]);
    expect(p.takeIPsChanged()).toBe(true);
  });

  test("a frontend key passing from one service to another in one change is touched, not gone", () => {
    const p = new FrontendPlanner();
    p.plan(nodeState([webEntry]), null, opts);
    const moved = entry(svc({ name: "web2", clusterIPs: [cip.v4], ports: [{ name: "http", port: 80 }] }), two);
    const r = p.plan(nodeState([moved]), new Set(["default/web", "default/web2"]), opts);
    expect(keys(r.touched)).toEqual([`tcp/${cip.v4}/80`]);
    expect(r.touched.get(`tcp/${cip.v4}/80`)?.service).toBe("default/web2:http");
    expect(r.gone).toEqual([]);
    expect([...p.serviceIPs]).toEqual([[cip.v4, 1]]);
  });
});

describe("Picker", () => {
  test("round-robin over the endpoints, skipping ones that just failed", () => {
    const p = new Picker(["a", "b", "c"]);
    expect([1, 2, 3, 4].map(() => p.pick("c1", 0))).toEqual(["a", "b", "c", "a"]);
    expect(p.pick("c1", 0, new Set(["b"]))).toBe("c");
    expect(p.pick("c1", 0, new Set(["a", "b", "c"]))).toBeUndefined();
  });

  test("ClientIP affinity: a client keeps its endpoint until the timeout, counted from its last connection", () => {
    const p = new Picker(["a", "b"], 1000);
    expect(p.pick("c1", 0)).toBe("a");
    expect(p.pick("c2", 0)).toBe("b");
    expect(p.pick("c1", 900)).toBe("a");
    expect(p.pick("c1", 1800)).toBe("a"); // refreshed at 900
    expect(p.pick("c1", 2900)).toBe("a"); // held until 2800: a new pick, and round-robin's turn is "a"
    expect(p.pick("c3", 2900)).toBe("b");
    expect(p.pick("c2", 5000)).toBe("a"); // c2 held "b" until 1000: picked anew
  });

  test("an endpoint that leaves frees its clients; the others keep theirs", () => {
    const p = new Picker(["a", "b"], 10_000);
    expect(p.pick("c1", 0)).toBe("a");
    expect(p.pick("c2", 0)).toBe("b");
    p.update(["b", "c"], 10_000);
    expect(p.pick("c2", 1)).toBe("b");
    expect(["b", "c"]).toContain(p.pick("c1", 1)!);
  });
});

describe("bind mode local routes", () => {
  const own = (ip: string, op = "append") =>
    `route ${op} local ${ip}${ip.includes(":") ? "/128" : "/32"} dev lo table local proto 156 scope host`;
  test("the batch adds what is missing and deletes what is no longer wanted, kpng's exact route on each", () => {
    expect(routeBatch(new Set([cip.v4, "198.18.0.99"]), new Set([cip.v4, cip.v6]))).toEqual({
      lines: [own("198.18.0.99", "del"), own(cip.v6)],
      alreadyLocal: new Set(),
    });
  });
  test("an address local already (the kernel's route for a node IP) gets no route, so none is deleted later", () => {
    const nodeIP = v4.node(0);
    const others = new Set([nodeIP]);
    expect(routeBatch(new Set(), new Set([nodeIP, cip.v4]), others)).toEqual({ lines: [own(cip.v4)], alreadyLocal: others });
    // the service goes: kpng deletes its own route only
    expect(routeBatch(new Set([cip.v4]), new Set(), others)).toEqual({ lines: [own(cip.v4, "del")], alreadyLocal: new Set() });
  });
  test("a route kpng holds stays kpng's when the address becomes local by another owner too", () => {
    expect(routeBatch(new Set([cip.v4]), new Set([cip.v4]), new Set([cip.v4]))).toEqual({ lines: [], alreadyLocal: new Set() });
  });
  test("`ip -j route show` parsed", () => {
    const json = JSON.stringify([
      { type: "local", dst: cip.v4, dev: "lo" },
      { type: "local", dst: `${cip.v6}/128`, dev: "lo" },
    ]);
    expect([...parseRoutes(json)]).toEqual([cip.v4, cip.v6]);
    expect([...parseRoutes("")]).toEqual([]);
  });
  test("other owners' local host routes: kpng's own copy of a destination does not count, prefixes and broadcasts do not", () => {
    const json = JSON.stringify([
      { type: "local", dst: "127.0.0.0/8", dev: "lo", protocol: "kernel" },
      { type: "local", dst: "127.0.0.1", dev: "lo", protocol: "kernel" },
      { type: "local", dst: v4.node(0), dev: "ext0", protocol: "kernel" },
      { type: "local", dst: v4.node(0), dev: "lo", protocol: "156" },
      { type: "broadcast", dst: "203.0.113.255", dev: "ext0", protocol: "kernel" },
      { type: "local", dst: cip.v4, dev: "lo", protocol: "156" },
      { type: "local", dst: `${cip.v6}/128`, dev: "eth1", protocol: "kernel" },
    ]);
    expect(othersLocal(json, new Set([v4.node(0), cip.v4]))).toEqual(new Set(["127.0.0.1", v4.node(0), cip.v6]));
  });
});

describe("redirect mode tables", () => {
  const f = (over: Partial<Frontend>): Frontend => ({
    key: "",
    proto: "tcp",
    family: "v4",
    ip: cip.v4,
    port: 80,
    kind: "cluster",
    service: "default/web:http",
    endpoints: ["x"],
    ...over,
  });
  test("golden: arriving packets DNATed to the node IP, local ones redirected; no-endpoint cluster IPs rejected", () => {
    const text = renderRedirect(
      [
        { frontend: f({}), port: 41000 },
        { frontend: f({ family: "v6", ip: cip.v6, proto: "udp", port: 53, service: "default/web:dns" }), port: 41001 },
      ],
      [f({ ip: v4.clusterIP(11), endpoints: [] }), f({ kind: "nodeport", ip: v4.node(0), port: 30080, endpoints: [] })],
      nodeIPs,
    );
    expect(text).toBe(
      [
        "table ip kpng-userspace",
        "delete table ip kpng-userspace",
        "table ip kpng-userspace {",
        "  chain prerouting {",
        "    type nat hook prerouting priority dstnat; policy accept;",
        `    ip daddr ${cip.v4} tcp dport 80 dnat to ${v4.node(0)}:41000 comment "default/web:http"`,
        "  }",
        "  chain output {",
        "    type nat hook output priority -100; policy accept;",
        `    ip daddr ${cip.v4} tcp dport 80 redirect to :41000 comment "default/web:http"`,
        "  }",
        "  chain refuse-forward {",
        "    type filter hook forward priority filter; policy accept;",
        `    ip daddr ${v4.clusterIP(11)} tcp dport 80 reject with tcp reset comment "default/web:http"`,
        "  }",
        "  chain refuse-output {",
        "    type filter hook output priority filter; policy accept;",
        `    ip daddr ${v4.clusterIP(11)} tcp dport 80 reject with tcp reset comment "default/web:http"`,
        "  }",
        "}",
        "table ip6 kpng-userspace",
        "delete table ip6 kpng-userspace",
        "table ip6 kpng-userspace {",
        "  chain prerouting {",
        "    type nat hook prerouting priority dstnat; policy accept;",
        `    ip6 daddr ${cip.v6} udp dport 53 dnat to [${v6.node(0)}]:41001 comment "default/web:dns"`,
        "  }",
        "  chain output {",
        "    type nat hook output priority -100; policy accept;",
        `    ip6 daddr ${cip.v6} udp dport 53 redirect to :41001 comment "default/web:dns"`,
        "  }",
        "  chain refuse-forward {",
        "    type filter hook forward priority filter; policy accept;",
        "  }",
        "  chain refuse-output {",
        "    type filter hook output priority filter; policy accept;",
        "  }",
        "}",
        "",
      ].join("\n"),
    );
  });
});

describe("the backend against a recorder", () => {
  const state = nodeState([entry(svc(web({ ports: [{ name: "http", port: 80 }] })), { a: ep({ ips: pod(1), ports: { http: 8080 } }) })]);

  test("--dry-run prints one line per frontend and runs nothing", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const { exec, calls } = recorder();
    const b = createUserspaceBackend(ctx, { exec });
    await b.setup();
    await b.apply(state, null);
    expect(calls).toEqual([]);
    expect(ctx.printed.join("")).toBe(
      [
        "# userspace (bind mode)",
        `tcp ${cip.v4}:80 default/web:http relay to ${v4.pod(0, 1)}:8080`,
        `tcp ${lb}:80 default/web:http relay to ${v4.pod(0, 1)}:8080`,
        `tcp [${cip.v6}]:80 default/web:http relay to [${v6.pod(0, 1)}]:8080`,
        "",
      ].join("\n"),
    );
  });

  test("a partial sync re-plans only the services that changed (--dry-run prints just those, and what went)", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const b = createUserspaceBackend(ctx, { exec: recorder().exec });
    const one = (name: string, ip: string, pod: number) =>
      entry(svc({ name, clusterIPs: [ip], ports: [{ name: "http", port: 80 }] }), {
        a: ep({ ips: [v4.pod(0, pod)], ports: { http: 8080 } }),
      });
    const s1 = nodeState([one("a", v4.clusterIP(1), 1), one("b", v4.clusterIP(2), 2)]);
    await b.apply(s1, null);
    const s2 = nodeState([one("a", v4.clusterIP(1), 3)], 2);
    await b.apply(s2, new Set(["default/a", "default/b"]));
    expect(ctx.printed[1]).toBe(
      [
        "# userspace (bind mode)",
        `tcp ${v4.clusterIP(1)}:80 default/a:http relay to ${v4.pod(0, 3)}:8080`,
        `tcp ${v4.clusterIP(2)}:80 gone`,
        "",
      ].join("\n"),
    );
    // a change naming nothing of b: b's frontend is not even looked at
    await b.apply(nodeState([one("a", v4.clusterIP(1), 4)], 3), new Set(["default/a"]));
    expect(ctx.printed[2]).toBe(
      ["# userspace (bind mode)", `tcp ${v4.clusterIP(1)}:80 default/a:http relay to ${v4.pod(0, 4)}:8080`, ""].join("\n"),
    );
  });

  test("bind mode: setup lets IPv6 bind service IPs; a sync reads kpng's routes once and writes the difference; --cleanup flushes them", async () => {
    const ctx = context(nodeConfig());
    const { exec, calls } = recorder();
    const b = createUserspaceBackend(ctx, { exec });
    await b.setup();
    // cluster IPs only: no endpoints, so no relay listens (nothing binds in this test)
    const empty = nodeState([entry(svc(web({ lbIPs: [], ports: [{ name: "http", port: 80 }] })), {})]);
    await b.apply(empty, null);
    await b.apply(empty, null);
    await b.cleanup();
    expect(calls.map((c) => [c.argv.join(" "), c.stdin ?? ""])).toEqual([
      ["sysctl -q -w net.ipv6.ip_nonlocal_bind=1", ""],
      ["ip -j -4 route show table local proto 156", ""],
      ["ip -j -6 route show table local proto 156", ""],
      // something to add: the local table is read for addresses local already (none here)
      ["ip -j -4 route show table local type local", ""],
      ["ip -j -6 route show table local type local", ""],
      [
        "ip -force -batch -",
        `route append local ${cip.v4}/32 dev lo table local proto 156 scope host\nroute append local ${cip.v6}/128 dev lo table local proto 156 scope host\n`,
      ],
      ["ip -4 route flush table local proto 156", ""],
      ["ip -6 route flush table local proto 156", ""],
      ["nft -f -", "table ip kpng-userspace\ndelete table ip kpng-userspace\ntable ip6 kpng-userspace\ndelete table ip6 kpng-userspace\n"],
    ]);
  });
});
