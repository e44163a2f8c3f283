// Issue 39: bind mode adds and removes only the local routes it owns. A
// frontend address that is already the node's (its node IP, another
// interface's address) gets no route from kpng, and a frontend address that
// another Service keeps keeps its route. For each frontend kind (cluster IP,
// external IP, LB IP, node port) at each such address, in a namespace of its
// own with real routes:
//   1. the Service is created, then deleted;
//   2. the local table's routes other than kpng's are the kernel's as before
//      kpng ever ran, at each step, and kpng's are as before the Service;
//   3. the node reaches its own addresses (a TCP connection to each);
//   4. created again, `kill -9`, the Service deleted while kpng is down,
//      kpng started again; then `kpng --cleanup`: the kernel's routes stay,
//      and none of kpng's is left.
// Before the fix, bind mode wrote its IPv4 routes with `route replace`,
// which took over the kernel's `local <node IP> dev ext0 proto kernel`
// route; deleting kpng's route then left the node without its own address.
// Before the fix, 7 of these 12 failed: cluster, external and LB IPs at the
// node IP or at another interface's IP (the kernel's route taken over at
// create, gone after the delete, after kill -9 + restart and after
// --cleanup, and the node could not bind or connect to that address), and
// the node port whose address another Service holds as an external IP (that
// Service took the route over). The other 5 passed before too: an address no
// interface holds was kpng's alone, and a node port adds no route.

import { afterEach, describe, expect, test } from "bun:test";
import { canonical6, run } from "../harness/netns.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { ep, entry, svc, type SvcSpec } from "../nft/fixtures.ts";
import { startKpng } from "../harness/kpng-process.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { localTable, tableProblems } from "./local-table.ts";
import { startProxy, type RelayProxy } from "./rig.ts";

/** the node's own address (ext0) and another interface's (if0) */
const node = { v4: v4.node(0), v6: canonical6(v6.node(0)) };
const iface = { v4: v4.node(7), v6: canonical6(v6.node(7)) };
/** an address no interface holds, which a second Service keeps as its own frontend */
const shared = { v4: v4.external(50), v6: canonical6(v6.external(50)) };

type Kind = "cluster IP" | "external IP" | "LB IP" | "node port";
type At = "the node IP" | "another interface's IP" | "another Service's frontend";

interface Shape {
  kind: Kind;
  at: At;
}

const kinds: Kind[] = ["cluster IP", "external IP", "LB IP", "node port"];
const ats: At[] = ["the node IP", "another interface's IP", "another Service's frontend"];
const shapes: Shape[] = kinds.flatMap((kind) => ats.map((at) => ({ kind, at })));

const endpoints = { p: ep({ ips: [v4.pod(0, 1), v6.pod(0, 1)], ports: { http: 8080 } }) };
const cip = (i: number) => [v4.clusterIP(i), v6.clusterIP(i)];

/**
 * The Service under test ("a"), the one that stays ("b", when the address
 * is another Service's frontend), and the --nodeport-addresses that put a
 * node port on the address.
 */
function servicesFor({ kind, at }: Shape): { a: ServiceEndpoints; b?: ServiceEndpoints; nodePortAddresses?: string[] } {
  const addr = at === "the node IP" ? node : at === "another interface's IP" ? iface : shared;
  const ips = [addr.v4, addr.v6];
  const spec: SvcSpec = { name: "a", clusterIPs: cip(10), ports: [{ name: "http", port: 80 }] };
  if (kind === "cluster IP") spec.clusterIPs = ips;
  if (kind === "external IP") spec.externalIPs = ips;
  if (kind === "LB IP") spec.lbIPs = ips;
  if (kind === "node port") spec.ports = [{ name: "http", port: 80, nodePort: 30080 }];
  const a = entry(svc(spec), endpoints);
  if (at !== "another Service's frontend") {
    // a node port listens on the node IPs; on another interface's address when --nodeport-addresses names it
    const nodePortAddresses = kind === "node port" && at === "another interface's IP" ? [`${iface.v4}/32`, `${iface.v6}/128`] : undefined;
    return { a, nodePortAddresses };
  }
  // b keeps the address as a frontend of another kind (a node port's address is the node IP: b's external IP there)
  const bIPs = kind === "node port" ? [node.v4, node.v6] : ips;
  const bSpec: SvcSpec =
    kind === "external IP"
      ? { name: "b", clusterIPs: cip(11), lbIPs: bIPs, ports: [{ name: "http", port: 81 }] }
      : { name: "b", clusterIPs: cip(11), externalIPs: bIPs, ports: [{ name: "http", port: 81 }] };
  return { a, b: entry(svc(bSpec), endpoints) };
}

/** a namespace holding a node: lo, ext0 with the node IP, if0 with another address, a default route to a sink */
async function nodeNamespace(): Promise<string> {
  const ns = `kpuo${Math.random().toString(36).slice(2, 8)}`;
  await run(["ip", "netns", "add", ns]);
  // addrgenmode none: no link-local addresses, which would come and go in the local table while it is compared
  const lines = [
    "link set lo up",
    "link add uplink0 type veth peer name uplink1",
    "link set uplink0 addrgenmode none",
    "link set uplink0 arp off up",
    "route add 0.0.0.0/0 dev uplink0",
    "route add ::/0 dev uplink0",
    ...["ext", "if"].flatMap((l) => [
      `link add ${l}0 type veth peer name ${l}1`,
      `link set ${l}0 addrgenmode none`,
      `link set ${l}1 addrgenmode none`,
    ]),
    `addr add ${node.v4}/24 dev ext0`,
    `addr add ${node.v6}/64 dev ext0 nodad`,
    `addr add ${iface.v4}/32 dev if0`,
    `addr add ${iface.v6}/128 dev if0 nodad`,
    ...["ext0", "ext1", "if0", "if1"].map((l) => `link set ${l} up`),
  ];
  await run(["ip", "-n", ns, "-batch", "-"], lines.join("\n") + "\n");
  // the IPv6 routes come once each veth has its carrier: the kernel's table is read when they are all in (bounded: 10 s)
  const settled = (t: string[]) =>
    t.some((l) => l.startsWith(`local ${node.v6} `)) &&
    t.some((l) => l.startsWith(`local ${iface.v6} `)) &&
    t.filter((l) => l.startsWith("multicast ff00::/8 ")).length === 4;
  const end = performance.now() + 10_000;
  while (!settled(await localTable(ns, false)) && performance.now() < end) await Bun.sleep(50);
  return ns;
}

let ns: string | undefined;
const proxies: RelayProxy[] = [];
afterEach(async () => {
  for (const p of proxies.splice(0)) await p.kill().catch(() => {});
  if (ns) await run(["ip", "netns", "del", ns]).catch(() => {});
  ns = undefined;
});

describe("bind mode removes only the local routes kpng added (issue 39)", () => {
  test.each(shapes)(
    "$kind at $at: the kernel's local routes stay through create, delete, kill -9 + restart and --cleanup",
    async (shape) => {
      ns = await nodeNamespace();
      const { a, b, nodePortAddresses } = servicesFor(shape);
      const kernel = await localTable(ns, false);
      const host = { node: { ns, ...node } };
      const config = nodePortAddresses ? { nodePortAddresses } : {};
      const start = async () => {
        const p = await startProxy(host, config);
        proxies.push(p);
        return p;
      };
      const others = b ? [b] : [];
      /** what went wrong at each step: kernel routes gone or changed, own addresses the node cannot reach, kpng's routes not as expected */
      const problems: string[] = [];
      const own = [node.v4, node.v6, iface.v4, iface.v6];
      const check = async (step: string, ours?: string[]) => problems.push(...(await tableProblems(ns!, step, { kernel, own, ours })));

      // the other Service first: kpng's routes before the Service under test
      let proxy = await start();
      await proxy.apply(others);
      const oursBefore = await localTable(ns, true);
      await check("before the Service");

      await proxy.apply([...others, a]);
      await check("the Service created");
      await proxy.apply(others);
      await check("the Service deleted", oursBefore);

      // created again; kpng killed; the Service deleted while kpng is down; kpng started again
      await proxy.apply([...others, a]);
      await proxy.kill();
      proxy = await start();
      await proxy.apply(others);
      await check("deleted while kpng was down, kpng restarted", oursBefore);

      // with the Service there, kpng killed, then --cleanup
      await proxy.apply([...others, a]);
      await proxy.kill();
      const cleanup = startKpng(["--cleanup", "--backend", "userspace"], { wrap: ["ip", "netns", "exec", ns] });
      const code = await cleanup.proc.exited;
      if (code !== 0) problems.push(`--cleanup: exit ${code}: ${cleanup.stderr.join("\n")}`);
      await check("--cleanup", []);
      expect(problems).toEqual([]);
    },
    60_000,
  );
});
