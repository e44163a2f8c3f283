// The few iptables rules of IPVS mode, and the names they use.

import { describe, expect, test } from "bun:test";
import { plan } from "../fixtures/addresses.ts";
import { type IptablesContext, iptablesRules, jumpArgv, masqueradeMark, printIptablesRestore } from "../../plugins/ipvs/render-iptables.ts";
import { baseJumps, setIds, setName } from "../../plugins/ipvs/names.ts";
import { FAMILIES, type Family } from "../../src/host/toolkit/index.ts";
import type { LocalDetect } from "../../src/core/config/config.ts";

const ctx = (o: Partial<IptablesContext> = {}): IptablesContext => ({
  clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
  masqueradeAll: false,
  masqueradeBit: 14,
  ...o,
});

const v4Golden = `*nat
:KPNG-SERVICES - [0:0]
:KPNG-POSTROUTING - [0:0]
:KPNG-MARK-MASQ - [0:0]
-A KPNG-MARK-MASQ -j MARK --or-mark 0x4000
-A KPNG-POSTROUTING -m comment --comment "hairpin: a pod reached itself through a service" -m set --match-set KPNG-LOOP-BACK dst,dst,src -j MASQUERADE
-A KPNG-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KPNG-POSTROUTING -j MARK --xor-mark 0x4000
-A KPNG-POSTROUTING -m comment --comment "service traffic requiring SNAT" -j MASQUERADE
-A KPNG-SERVICES -m comment --comment "cluster IP from pods" -s ${plan.v4.clusterCIDR} -m set --match-set KPNG-CLUSTER-IP dst,dst -j RETURN
-A KPNG-SERVICES -m comment --comment "cluster IP from outside the pod network" -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-MARK-MASQ
-A KPNG-SERVICES -m comment --comment "external IP" -m set --match-set KPNG-EXTERNAL-IP dst,dst -j KPNG-MARK-MASQ
-A KPNG-SERVICES -m comment --comment "load balancer IP" -m set --match-set KPNG-LOAD-BALANCER dst,dst -j KPNG-MARK-MASQ
-A KPNG-SERVICES -m comment --comment "node port" -m set --match-set KPNG-NODE-PORT dst,dst -j KPNG-MARK-MASQ
COMMIT
*filter
:KPNG-IPVS-FILTER - [0:0]
:KPNG-FORWARD - [0:0]
-A KPNG-IPVS-FILTER -m comment --comment "loadBalancerSourceRanges: source not allowed" -m set --match-set KPNG-LOAD-BALANCER-FW dst,dst -m set ! --match-set KPNG-LOAD-BALANCER-SRC-CIDR dst,dst,src -j DROP
-A KPNG-IPVS-FILTER -m comment --comment "Local traffic policy without local endpoints" -m conntrack --ctstate NEW -m set --match-set KPNG-DROP dst,dst -j DROP
-A KPNG-IPVS-FILTER -m comment --comment "service has no endpoints" -m conntrack --ctstate NEW -m set --match-set KPNG-REJECT dst,dst -j REJECT
-A KPNG-FORWARD -m comment --comment "masqueraded service traffic" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KPNG-FORWARD -m comment --comment "service traffic replies" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`;

const clusterIPRules = (family: Family, c: IptablesContext) =>
  printIptablesRestore(iptablesRules(family, c))
    .split("\n")
    .filter((l) => l.includes("CLUSTER-IP"));

describe("ipvs iptables rules", () => {
  test("IPv4 rules: masquerade classes by ipset, filter for source ranges, DROP and REJECT", () => {
    expect(printIptablesRestore(iptablesRules("v4", ctx()))).toBe(v4Golden);
  });

  test("cluster IP from pods keeps its source; masqueradeAll masquerades everything", () => {
    expect(clusterIPRules("v4", ctx({ masqueradeAll: true }))).toEqual([
      `-A KPNG-SERVICES -m comment --comment "cluster IP: masquerade all" -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-MARK-MASQ`,
    ]);
  });

  test("no cluster CIDR and no masqueradeAll: cluster IP traffic is not masqueraded (upstream)", () => {
    expect(clusterIPRules("v4", ctx({ clusterCIDRs: [] }))).toEqual([]);
  });

  const fromPods = (m: string) =>
    `-A KPNG-SERVICES -m comment --comment "cluster IP from pods" ${m} -m set --match-set KPNG-CLUSTER-IP dst,dst -j RETURN`;
  const fromOutside = `-A KPNG-SERVICES -m comment --comment "cluster IP from outside the pod network" -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-MARK-MASQ`;
  test.each<{ mode: string; localDetect: LocalDetect; match: string }>([
    { mode: "BridgeInterface", localDetect: { kind: "bridge", iface: "cbr0" }, match: "-i cbr0" },
    { mode: "InterfaceNamePrefix", localDetect: { kind: "prefix", prefix: "veth" }, match: "-i veth+" },
    { mode: "NodeCIDR", localDetect: { kind: "node-cidr", cidrs: ["198.19.4.0/24"] }, match: "-s 198.19.4.0/24" },
  ])("detectLocalMode $mode: pods are told by $match, not by the cluster CIDR", ({ localDetect, match }) => {
    expect(clusterIPRules("v4", ctx({ localDetect }))).toEqual([fromPods(match), fromOutside]);
  });

  test("IPv6 rules use the KPNG-6- sets and the IPv6 cluster CIDR only", () => {
    const text = printIptablesRestore(iptablesRules("v6", ctx()));
    expect(text).toContain(`-s ${plan.v6.clusterCIDR} -m set --match-set KPNG-6-CLUSTER-IP dst,dst -j RETURN`);
    expect(text).not.toContain(plan.v4.clusterCIDR);
    expect(text).not.toMatch(/--match-set KPNG-(?!6-)/);
  });

  test("masquerade mark comes from Config.masqueradeBit", () => {
    expect(masqueradeMark(14)).toBe("0x4000");
    expect(printIptablesRestore(iptablesRules("v4", ctx({ masqueradeBit: 5 })))).toContain("--or-mark 0x20");
  });

  test("jumps from the built-in chains carry a comment and use iptables or ip6tables", () => {
    expect(jumpArgv("v6", "-C", baseJumps[0]!)).toEqual([
      "ip6tables",
      "-w",
      "-t",
      "nat",
      "-C",
      "PREROUTING",
      "-m",
      "comment",
      "--comment",
      "kpng service portals",
      "-j",
      "KPNG-SERVICES",
    ]);
  });

  test("every ipset name fits the kernel's 31-character limit", () => {
    for (const f of FAMILIES) for (const id of setIds) expect(setName(id, f).length).toBeLessThanOrEqual(31);
  });
});
