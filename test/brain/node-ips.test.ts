// The node's IPs as upstream kube-proxy defines them (GetNodeHostIPs +
// detectNodeIPs), and the brain keeping them current in the node-local state.

import { describe, expect, test } from "bun:test";
import { Brain, type Revision } from "../../src/core/brain/brain.ts";
import { kinds } from "../../src/core/brain/k8s/objects.ts";
import { nodeIPs } from "../../src/core/brain/node-ips.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";

type Addr = { type: string; address: string };
const withAddrs = (addresses: Addr[]) => ({ status: { addresses } });
const internal = (address: string) => ({ type: "InternalIP", address });
const external = (address: string) => ({ type: "ExternalIP", address });
const hostname = (address: string) => ({ type: "Hostname", address });

describe("node IPs: upstream's rules", () => {
  const N4 = v4.node(1);
  const N6 = v6.node(1);
  const E4 = "198.51.100.7";
  const E6 = "2001:db8:ff::7";
  const cases: Array<{ name: string; addrs: Addr[] | null; override?: string[]; want: string[] }> = [
    { name: "no Node: none", addrs: null, want: [] },
    { name: "Node without addresses: none", addrs: [], want: [] },
    { name: "only a Hostname: none", addrs: [hostname("node-1")], want: [] },
    { name: "one InternalIP", addrs: [internal(N4)], want: [N4] },
    { name: "InternalIP per family, in the Node's order (primary first)", addrs: [internal(N6), internal(N4)], want: [N6, N4] },
    { name: "InternalIP wins over an ExternalIP listed before it", addrs: [external(E4), internal(N4)], want: [N4] },
    { name: "no InternalIP: the ExternalIP", addrs: [hostname("node-1"), external(E4)], want: [E4] },
    { name: "InternalIP of one family, ExternalIP of the other", addrs: [internal(N4), external(E6)], want: [N4, E6] },
    {
      name: "several InternalIPs of one family: the first only",
      addrs: [internal(N4), internal("203.0.113.99"), internal(N6)],
      want: [N4, N6],
    },
    { name: "an address that is not an IP is skipped", addrs: [internal("node-1.example"), internal(N4)], want: [N4] },
    {
      name: "read as upstream's ParseIPSloppy: leading zeros decimal, IPv6 as Go prints it",
      addrs: [internal("203.000.113.011"), internal("2001:DB8:3:0:0:0:0:B")],
      want: [N4, N6],
    },
    {
      name: "override of one family replaces that family and becomes primary",
      addrs: [internal(N4), internal(N6)],
      override: ["2001:db8:3::99"],
      want: ["2001:db8:3::99", N4],
    },
    { name: "override without a Node", addrs: null, override: [E4], want: [E4] },
    { name: "override of both families: the Node is not used", addrs: [internal(N4), internal(N6)], override: [E4, E6], want: [E4, E6] },
  ];
  for (const c of cases) test(c.name, () => expect(nodeIPs(c.addrs ? withAddrs(c.addrs) : undefined, c.override)).toEqual(c.want));
});

describe("node IPs in the node-local state", () => {
  const up = (object: ReturnType<typeof node> | ReturnType<typeof svc> | ReturnType<typeof slice>) => ({ type: "upsert" as const, object });
  const synced = (brain: Brain) => {
    for (const k of kinds) brain.markSynced(k);
    brain.flush();
  };

  test("the first revision carries the Node's IPs; the override wins, for the operator's own node only", () => {
    const brain = new Brain({ nodeIPOverride: { node: "node-1", ips: ["198.51.100.1"] } });
    brain.apply([up(svc()), up(node("node-1", { ips: [v4.node(1), v6.node(1)] })), up(node("node-2", { ips: [v4.node(2)] }))]);
    synced(brain);
    expect(brain.view("node-1").state!.nodeIPs).toEqual(["198.51.100.1", v6.node(1)]);
    expect(brain.view("node-2").state!.nodeIPs).toEqual([v4.node(2)]);
  });

  test("a Node IP change is a new revision with a null change set (re-render everything); same services", () => {
    const brain = new Brain();
    brain.apply([up(svc()), up(slice({ endpoints: [{ ip: v4.pod(1, 1), node: "node-1" }] })), up(node("node-1", { ips: [v4.node(1)] }))]);
    synced(brain);
    const view = brain.view("node-1");
    const revs: Revision[] = [];
    view.subscribe((r) => revs.push(r));
    const before = view.state!;
    brain.apply([up(node("node-1", { ips: ["203.0.113.99"] }))]);
    brain.flush();
    expect(revs.map((r) => [r.state.rev, r.change, r.state.nodeIPs])).toEqual([
      [1, null, [v4.node(1)]],
      [2, null, ["203.0.113.99"]],
    ]);
    expect(view.state!.services.get("default/web")).toBe(before.services.get("default/web")!);
  });

  test("the Node appearing later is a revision; a Node update that changes neither IPs nor zone is none", () => {
    const brain = new Brain();
    brain.apply([up(svc())]);
    synced(brain);
    const view = brain.view("node-1");
    expect(view.state!.nodeIPs).toEqual([]);
    brain.apply([up(node("node-1", { ips: [v4.node(1)] }))]);
    brain.flush();
    expect([view.state!.rev, view.state!.nodeIPs]).toEqual([2, [v4.node(1)]]);
    const computed = brain.stats.computed;
    brain.apply([up(node("node-1", { ips: [v4.node(1)] }))]);
    brain.flush();
    expect(view.state!.rev).toBe(2);
    // same zone: no service recomputed for a Node update
    expect(brain.stats.computed).toBe(computed);
  });

  test("a zone change still recomputes every service (topology hints)", () => {
    const brain = new Brain();
    brain.apply([up(svc()), up(node("node-1", { zone: "zone-a", ips: [v4.node(1)] }))]);
    synced(brain);
    brain.view("node-1");
    const computed = brain.stats.computed;
    brain.apply([up(node("node-1", { zone: "zone-b", ips: [v4.node(1)] }))]);
    brain.flush();
    expect(brain.stats.computed).toBe(computed + 1);
  });
});
