// What the migration tests share: the one-Service cluster kpng reads (the
// same Service the kube-proxy fixtures serve), loading rules into the node
// namespace, and reading back whose rules the node holds, by the tools'
// own output (independent of the planner under test).

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { v4, v6 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import type { Topology } from "../../harness/netns.ts";
import { asList } from "../../deployed/cluster.ts";
import type { Svc } from "./kube-proxy-rules.ts";

export const NODE = "node-a";

/** the Service of kube-proxy-rules.ts, on this topology's pods */
export const webService = (topo: Topology): Svc & { nodeIP: string } => ({
  clusterIP: v4.clusterIP(10),
  endpoints: topo.pods.slice(0, 2).map((p) => p.v4),
  podCIDR: "198.19.0.0/16",
  nodePort: 30080,
  nodeIP: topo.node.v4,
});

/** The cluster: this node, and `default/web` (ClusterIP and node port 30080) on the topology's two pods. */
export function clusterObjects(topo: Topology) {
  const s = webService(topo);
  return [
    node(NODE, { ips: [topo.node.v4] }),
    svc({
      name: "web",
      type: "NodePort",
      clusterIPs: [s.clusterIP],
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: s.nodePort }],
    }),
    slice({ service: "web", endpoints: topo.pods.slice(0, 2).map((p) => ({ ip: p.v4, node: NODE, pod: p.name })) }),
  ];
}

/** `default/web6`: an IPv6 cluster IP on pod0, so that kube-proxy writes rules of that family too */
export const web6Objects = (topo: Topology) => [
  svc({ name: "web6", clusterIPs: [v6.clusterIP(10)], ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] }),
  slice({ service: "web6", family: "IPv6", endpoints: [{ ip: topo.pods[0].v6, node: NODE, pod: topo.pods[0].name }] }),
];

/** Whether kube-proxy's rules (KubeProxy.rules()) send port 80 of each cluster IP to its Service */
export function kubeProxyServes(mode: "iptables" | "nftables", rules: string, clusterIPs: string[]): boolean {
  return clusterIPs.every((ip) =>
    mode === "iptables"
      ? new RegExp(`-A KUBE-SERVICES -d ${ip}/(32|128) -p tcp .*--dport 80 -j KUBE-SVC-`).test(rules)
      : rules.includes(`${ip} . tcp . 80 : goto service-`),
  );
}

/** `kubectl get -o json` of that cluster, written where kpng's --input reads it */
export function writeCluster(topo: Topology, dir: string): string {
  const file = join(dir, "cluster.json");
  writeFileSync(file, JSON.stringify(asList(clusterObjects(topo)), null, 1));
  return file;
}

const IPT_SAVES = ["iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"];

/** What the node holds, per tool: nft tables, iptables chains of both flavours and families, ipsets, links. */
export async function holdings(topo: Topology) {
  const ns = topo.node.ns;
  const chains: string[] = [];
  for (const cmd of IPT_SAVES) {
    let table = "";
    for (const l of (await topo.exec(ns, [cmd]).catch(() => "")).split("\n")) {
      if (l.startsWith("*")) table = l.slice(1);
      if (l.startsWith(":")) chains.push(`${cmd.replace("-save", "")} ${table} ${l.slice(1).split(" ")[0]}`);
    }
  }
  const tables = (await topo.exec(ns, ["nft", "list", "tables"])).split("\n").filter(Boolean);
  const ipsets = (await topo.exec(ns, ["ipset", "list", "-n"])).split("\n").filter(Boolean);
  const links = (JSON.parse(await topo.exec(ns, ["ip", "-j", "link", "show"])) as Array<{ ifname: string }>).map((l) => l.ifname);
  return { chains, tables, ipsets, links };
}

/** kube-proxy's footprint in a holdings listing: its nft tables, its KUBE- chains (not kubelet's), its ipsets */
export function kubeProxyHeld(h: Awaited<ReturnType<typeof holdings>>): string[] {
  const kubelet = /KUBE-(FIREWALL|KUBELET-CANARY|IPTABLES-HINT)$/;
  return [
    ...h.tables.filter((t) => t.endsWith(" kube-proxy")),
    ...h.chains.filter((c) => / KUBE-/.test(c) && !kubelet.test(c)),
    ...h.ipsets.filter((s) => s.startsWith("KUBE-") && !s.startsWith("KUBE-SRC-")),
  ];
}

/** kpng's footprint: its nft tables, KPNG- chains and ipsets */
export function kpngHeld(h: Awaited<ReturnType<typeof holdings>>): string[] {
  return [
    ...h.tables.filter((t) => t.endsWith(" kpng")),
    ...h.chains.filter((c) => / KPNG-/.test(c)),
    ...h.ipsets.filter((s) => s.startsWith("KPNG-")),
  ];
}

/** Other software's rules the fixtures load: every one must survive every sweep. */
export const foreignHeld = (h: Awaited<ReturnType<typeof holdings>>) => ({
  kubelet: ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"].every((c) =>
    h.chains.some((l) => l.startsWith("iptables-nft ") && l.endsWith(` ${c}`)),
  ),
  cni: h.chains.some((l) => l.endsWith(" CNI-HOSTPORT-DNAT")) && h.chains.some((l) => l.endsWith(" CNI-FORWARD")),
  firewall: h.tables.includes("table inet firewalld-like"),
  kubeRouterIpset: h.ipsets.includes("KUBE-SRC-RN7WVLPO"),
});
