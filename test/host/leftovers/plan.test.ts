// The planner (pure) on listings of kube-proxy's shapes in each mode, and the
// sweep's executor against a recorder: what goes, what stays, in which order.

import { describe, expect, test } from "bun:test";
import { memoryLogger } from "../../../src/core/log.ts";
import type { Executor } from "../../../src/host/backend.ts";
import { planCommands, removeLeftovers } from "../../../src/host/leftovers/index.ts";
import {
  emptyPlan,
  parseIptablesSave,
  planLeftovers,
  type IptablesDump,
  type Listing,
  type PlanOptions,
} from "../../../src/host/leftovers/plan.ts";
import { v4 } from "../../fixtures/addresses.ts";
import {
  foreignIptables,
  foreignNft,
  ipvsModeIpsets,
  ipvsModeIptables,
  ipvsModeVirtualServers,
  kubeProxyIptables,
} from "./kube-proxy-rules.ts";

// the addresses of golden/kube-proxy-iptables.save (captured from the real kube-proxy): its chain names hash them
const SVC = "KUBE-SVC-CDGGSHYLG3RE2FKL";
const EXT = "KUBE-EXT-CDGGSHYLG3RE2FKL";
const SEP_A = "KUBE-SEP-54MA26PPZ7RNNNEC";
const SEP_B = "KUBE-SEP-W3MPR2YZK5V2AW7R";
const web = { clusterIP: v4.clusterIP(10), endpoints: [v4.pod(0, 1), v4.pod(0, 2)], podCIDR: "198.19.0.0/16", nodePort: 30080 };
const nodeIP = v4.node(0);
const other = v4.external(9);

/** iptables-save output after restoring `texts` in order (chains and rules merged per table, as the kernel would hold them) */
function saved(...texts: string[]): string {
  const tables = new Map<string, { chains: string[]; rules: string[] }>();
  for (const text of texts) {
    let t: { chains: string[]; rules: string[] } | undefined;
    for (const line of text.split("\n")) {
      if (line.startsWith("*")) {
        const name = line.slice(1);
        t = tables.get(name) ?? { chains: [], rules: [] };
        tables.set(name, t);
      } else if (line.startsWith(":") && t && !t.chains.some((c) => c.split(" ")[0] === line.split(" ")[0])) t.chains.push(line);
      else if (line.startsWith("-A ")) t?.rules.push(line);
    }
  }
  return [...tables].map(([name, t]) => [`*${name}`, ...t.chains, ...t.rules, "COMMIT"].join("\n")).join("\n") + "\n";
}

const emptyListing = (): Listing => ({ nftTables: "", iptables: [], ipsets: "", device: "", deviceAddrs: "", ipvs: "" });
const dump = (save: string, flavour: IptablesDump["flavour"] = "nft", family: IptablesDump["family"] = "v4"): IptablesDump => ({
  flavour,
  family,
  save,
});
const dummy = JSON.stringify([{ ifname: "kube-ipvs0", linkinfo: { info_kind: "dummy" } }]);
const onDevice = (...ips: string[]) =>
  JSON.stringify([{ ifname: "kube-ipvs0", addr_info: ips.map((local) => ({ local, scope: "global" })) }]);
const kpngIptables = `*nat\n:KPNG-SERVICES - [0:0]\n:KPNG-CANARY - [0:0]\n-A PREROUTING -m comment --comment "kpng service portals" -j KPNG-SERVICES\nCOMMIT\n`;

/** chains deleted (`-X`) by a plan's restores, as "table CHAIN" */
function deletedChains(inputs: string[]): string[] {
  const out: string[] = [];
  for (const input of inputs) {
    let table = "";
    for (const l of input.split("\n")) {
      if (l.startsWith("*")) table = l.slice(1);
      if (l.startsWith("-X ")) out.push(`${table} ${l.slice(3)}`);
    }
  }
  return out.sort();
}

const kubeProxyIptablesChains = [
  "filter KUBE-EXTERNAL-SERVICES",
  "filter KUBE-FORWARD",
  "filter KUBE-NODEPORTS",
  "filter KUBE-PROXY-CANARY",
  "filter KUBE-PROXY-FIREWALL",
  "filter KUBE-SERVICES",
  "mangle KUBE-PROXY-CANARY",
  `nat ${EXT}`,
  "nat KUBE-MARK-MASQ",
  "nat KUBE-NODEPORTS",
  "nat KUBE-POSTROUTING",
  "nat KUBE-PROXY-CANARY",
  `nat ${SEP_A}`,
  `nat ${SEP_B}`,
  "nat KUBE-SERVICES",
  `nat ${SVC}`,
];

interface Case {
  name: string;
  listing: Partial<Listing>;
  opts: PlanOptions;
  chains?: string[];
  nft?: string;
  ipvs?: string;
  deleteDevice?: boolean;
  ipsets?: string[];
  /** substrings of the `kept` notes */
  kept?: string[];
}

const kubeProxyOnly: PlanOptions = { owners: ["kube-proxy"] };
const everything: PlanOptions = { owners: ["kpng", "kube-proxy"] };

/** what IPVS mode leaves on a node: its ipsets, kube-ipvs0 holding web's cluster IP, its virtual servers beside another program's */
const ipvsMode = (): Partial<Listing> => ({
  ipsets: ipvsModeIpsets(web),
  device: dummy,
  deviceAddrs: onDevice(web.clusterIP),
  ipvs: ipvsModeVirtualServers({ ...web, nodeIP, other }),
});
/** the ipsets of ipvsMode() */
const ipvsModeSets = [
  "KUBE-6-CLUSTER-IP",
  "KUBE-CLUSTER-IP",
  "KUBE-EXTERNAL-IP",
  "KUBE-HEALTH-CHECK-NODE-PORT",
  "KUBE-IPVS-IPS",
  "KUBE-LOAD-BALANCER",
  "KUBE-LOAD-BALANCER-FW",
  "KUBE-LOOP-BACK",
  "KUBE-NODE-PORT-TCP",
];

const cases: Case[] = [
  {
    name: "iptables mode: every kube-proxy chain and jump goes; kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT and a CNI's chains stay",
    listing: { iptables: [dump(saved(foreignIptables(), kubeProxyIptables()))] },
    opts: kubeProxyOnly,
    chains: kubeProxyIptablesChains,
  },
  {
    name: "a chain of kube-proxy's that another program's chain still jumps to stays, with what it reaches",
    listing: {
      iptables: [
        dump(
          saved(
            foreignIptables(),
            kubeProxyIptables(),
            "*nat\n:CNI-HOSTPORT-SETMARK - [0:0]\n-A CNI-HOSTPORT-SETMARK -j KUBE-MARK-MASQ\nCOMMIT\n",
          ),
        ),
      ],
    },
    opts: kubeProxyOnly,
    chains: kubeProxyIptablesChains.filter((c) => c !== "nat KUBE-MARK-MASQ"),
    kept: ["iptables-nft v4 nat KUBE-MARK-MASQ: another program's chain still reaches it"],
  },
  {
    name: "what a kept chain reaches stays too: another program jumping to KUBE-SERVICES keeps the whole service tree, the rest goes",
    listing: {
      iptables: [
        dump(saved(foreignIptables(), kubeProxyIptables(), "*nat\n:OTHER-PORTALS - [0:0]\n-A OTHER-PORTALS -j KUBE-SERVICES\nCOMMIT\n")),
      ],
    },
    opts: kubeProxyOnly,
    chains: [
      "filter KUBE-EXTERNAL-SERVICES",
      "filter KUBE-FORWARD",
      "filter KUBE-NODEPORTS",
      "filter KUBE-PROXY-CANARY",
      "filter KUBE-PROXY-FIREWALL",
      "filter KUBE-SERVICES",
      "mangle KUBE-PROXY-CANARY",
      "nat KUBE-POSTROUTING",
      "nat KUBE-PROXY-CANARY",
    ],
    kept: [
      "iptables-nft v4 nat KUBE-SERVICES: another program's chain still reaches it",
      `iptables-nft v4 nat ${SEP_A}: another program's chain still reaches it`,
      "iptables-nft v4 nat KUBE-MARK-MASQ: another program's chain still reaches it",
    ],
  },
  {
    name: "kpng's KPNG- chains stay when only kube-proxy's rules go",
    listing: { iptables: [dump(saved(foreignIptables(), kpngIptables))] },
    opts: kubeProxyOnly,
    chains: [],
  },
  {
    name: "--cleanup: kpng's chains in both flavours and families",
    listing: {
      iptables: [dump(saved(foreignIptables(), kpngIptables), "legacy"), dump(saved(foreignIptables("v6"), kpngIptables), "nft", "v6")],
    },
    opts: everything,
    chains: ["nat KPNG-CANARY", "nat KPNG-CANARY", "nat KPNG-SERVICES", "nat KPNG-SERVICES"],
  },
  {
    name: "IPVS mode's iptables chains go, kubelet's stay",
    listing: { iptables: [dump(saved(foreignIptables(), ipvsModeIptables(web)), "legacy")] },
    opts: kubeProxyOnly,
    chains: [
      "filter KUBE-FORWARD",
      "filter KUBE-IPVS-FILTER",
      "filter KUBE-IPVS-OUT-FILTER",
      "filter KUBE-NODE-PORT",
      "filter KUBE-PROXY-FIREWALL",
      "filter KUBE-SOURCE-RANGES-FIREWALL",
      "nat KUBE-LOAD-BALANCER",
      "nat KUBE-MARK-MASQ",
      "nat KUBE-NODE-PORT",
      "nat KUBE-POSTROUTING",
      "nat KUBE-SERVICES",
    ],
  },
  {
    name: "nftables mode: both kube-proxy tables go in one transaction; kpng's and a firewall's tables stay",
    listing: { nftTables: "table ip filter\ntable ip kube-proxy\ntable ip6 kube-proxy\ntable ip kpng\ntable inet firewalld-like\n" },
    opts: kubeProxyOnly,
    nft: "delete table ip kube-proxy\ndelete table ip6 kube-proxy\n",
  },
  {
    name: "--cleanup: kpng's tables too",
    listing: { nftTables: "table ip kube-proxy\ntable ip kpng\ntable ip6 kpng\ntable inet firewalld-like\n" },
    opts: everything,
    nft: "delete table ip kpng\ndelete table ip6 kpng\ndelete table ip kube-proxy\n",
  },
  {
    name: "IPVS mode: its virtual servers (on kube-ipvs0's addresses and its node ports), the dummy device and its ipsets (v4 and v6) go; another program's virtual server and kube-router's ipset stay",
    listing: ipvsMode(),
    opts: kubeProxyOnly,
    ipvs: `-D -t ${web.clusterIP}:80\n-D -t ${nodeIP}:${web.nodePort}\n`,
    deleteDevice: true,
    ipsets: ipvsModeSets,
  },
  {
    name: "kpng runs its IPVS backend: kube-ipvs0 and the virtual servers stay (its first sync took them over); kube-proxy's ipsets go",
    listing: ipvsMode(),
    opts: { owners: ["kube-proxy"], keepIpvs: true },
    ipvs: "",
    deleteDevice: false,
    ipsets: ipvsModeSets,
    kept: ["kube-ipvs0 and its virtual servers: kpng's IPVS backend uses them"],
  },
  {
    name: "a kube-ipvs0 that is not a dummy device is not IPVS mode's: kept",
    listing: { device: JSON.stringify([{ ifname: "kube-ipvs0", linkinfo: { info_kind: "bridge" } }]) },
    opts: everything,
    deleteDevice: false,
    kept: ["device kube-ipvs0: a bridge device, not IPVS mode's dummy"],
  },
  {
    name: "--cleanup: kpng's ipsets (iptables hairpin, IPVS backend) and its node-port virtual servers",
    listing: {
      ipsets:
        "create KPNG-HAIRPIN-V4 hash:ip,port,ip family inet\ncreate KPNG-NODE-PORT hash:ip,port family inet\nadd KPNG-NODE-PORT 203.0.113.10,tcp:30080\ncreate KUBE-SRC-X hash:ip family inet\n",
      ipvs: `-A -t ${nodeIP}:30080 -s rr\n-A -t ${other}:443 -s wlc\n`,
    },
    opts: everything,
    ipvs: `-D -t ${nodeIP}:30080\n`,
    ipsets: ["KPNG-HAIRPIN-V4", "KPNG-NODE-PORT"],
  },
  {
    name: "a node where kube-proxy never ran: nothing to do",
    listing: { nftTables: foreignNft.split("\n")[0], iptables: [dump(saved(foreignIptables()))] },
    opts: everything,
  },
];

describe("planLeftovers", () => {
  for (const c of cases)
    test(c.name, () => {
      const plan = planLeftovers({ ...emptyListing(), ...c.listing }, c.opts);
      expect(deletedChains(plan.iptables.map((s) => s.input))).toEqual((c.chains ?? []).sort());
      expect(plan.nft).toBe(c.nft ?? "");
      expect(plan.ipvs).toBe(c.ipvs ?? "");
      expect(plan.deleteDevice).toBe(c.deleteDevice ?? false);
      expect(plan.ipsets.sort()).toEqual(c.ipsets ?? []);
      for (const k of c.kept ?? []) expect(plan.kept).toContain(k);
      if (!c.chains?.length && !c.nft && !c.ipvs && !c.deleteDevice && !c.ipsets?.length) expect(emptyPlan(plan)).toBe(true);
    });

  test("restores touch no chain of other software: every line names an owner's chain or deletes a jump to one", () => {
    const plan = planLeftovers({ ...emptyListing(), iptables: [dump(saved(foreignIptables(), kubeProxyIptables()))] }, kubeProxyOnly);
    for (const line of plan.iptables[0]!.input.split("\n")) {
      if (!line || line === "COMMIT" || line.startsWith("*")) continue;
      expect(line).toMatch(/^(:KUBE-|-X KUBE-|-D (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) .* -j KUBE-)/);
      expect(line).not.toMatch(/KUBE-FIREWALL|KUBE-KUBELET-CANARY|KUBE-IPTABLES-HINT|CNI-/);
    }
    // jumps first, then flushes, then deletes: -X finds every chain unreferenced
    const nat = plan.iptables[0]!.input.split("*nat\n")[1]!;
    expect(nat.indexOf("-D ")).toBeLessThan(nat.indexOf(":KUBE-"));
    expect(nat.lastIndexOf(":KUBE-")).toBeLessThan(nat.indexOf("-X "));
  });

  test("the parser reads iptables-save as the tools print it", () => {
    const t = parseIptablesSave(saved(kubeProxyIptables())).get("nat")!;
    expect(t.chains).toContain(SVC);
    expect(t.builtinJumps.find((r) => r.chain === "PREROUTING")?.target).toBe("KUBE-SERVICES");
    // jumps between chains are kept, DNAT/MARK/MASQUERADE targets are not chains
    expect(t.edges.get(SVC)).toEqual(["KUBE-MARK-MASQ", SEP_A, SEP_B]);
    expect(t.edges.get(SEP_A)).toEqual(["KUBE-MARK-MASQ"]);
    // the node port's two rules (localhost, then every address) both reach the service's external chain
    expect(t.edges.get("KUBE-NODEPORTS")).toEqual([EXT, EXT]);
  });
});

/** answers the sweep's reads from a listing and records every other command; `fail` makes one throw */
function fakeNode(listing: Partial<Listing>, fail?: (argv: string[]) => boolean) {
  const ran: Array<{ argv: string[]; stdin?: string }> = [];
  const l = { ...emptyListing(), ...listing };
  const reads: Record<string, string> = {
    "ipset save": l.ipsets,
    "ip -j -d link show kube-ipvs0": l.device,
    "ip -j addr show dev kube-ipvs0": l.deviceAddrs,
    "ipvsadm -Sn": l.ipvs,
    ...Object.fromEntries(l.iptables.map((d) => [`${d.family === "v4" ? "iptables" : "ip6tables"}-${d.flavour}-save`, d.save])),
  };
  const exec: Executor = {
    async run(argv, stdin) {
      const key = argv.join(" ");
      if (key in reads) return reads[key]!;
      const chain = /^nft list (?:set (\S+) (\S+) cluster-ips|chain (\S+) (\S+) nat-prerouting)$/.exec(key);
      if (chain) {
        if (l.nftTables.split("\n").includes(`table ${chain[1] ?? chain[3]} ${chain[2] ?? chain[4]}`)) return "";
        throw new Error(`${key}: exit 1: No such file or directory`);
      }
      if (/-save$|^ipvsadm -Sn$|^ip -j/.test(key)) throw new Error(`${argv[0]}: not found`);
      ran.push({ argv, stdin });
      if (fail?.(argv)) throw new Error(`${key}: exit 1: refused`);
      return "";
    },
  };
  return { exec, ran };
}

describe("removeLeftovers (recorder)", () => {
  const listing: Partial<Listing> = {
    nftTables: "table ip kube-proxy\n",
    iptables: [dump(saved(foreignIptables(), ipvsModeIptables(web)), "legacy"), dump(saved(foreignIptables(), kubeProxyIptables()))],
    ...ipvsMode(),
  };

  test("order: nftables, iptables (legacy, nft), IPVS, the device, then the ipsets the rules matched", async () => {
    const node = fakeNode(listing);
    const { failures } = await removeLeftovers({ exec: node.exec, log: memoryLogger(), owners: ["kube-proxy"] });
    expect(failures).toEqual([]);
    expect(node.ran.map((r) => r.argv.slice(0, 2).join(" "))).toEqual([
      "nft -f",
      "iptables-legacy-restore --noflush",
      "iptables-nft-restore --noflush",
      "ipvsadm -R",
      "ip link",
      ...Array(9).fill("ipset destroy"),
    ]);
  });

  test("a failing step is reported and the others still run", async () => {
    const node = fakeNode(listing, (argv) => argv[0] === "iptables-legacy-restore");
    const log = memoryLogger();
    const { failures } = await removeLeftovers({ exec: node.exec, log, owners: ["kube-proxy"] });
    expect(failures).toHaveLength(1);
    expect(failures[0]).toContain("iptables-legacy-restore");
    expect(node.ran.some((r) => r.argv[0] === "ipset")).toBe(true);
  });

  test("--dry-run prints the commands and runs none", async () => {
    const node = fakeNode(listing);
    const out: string[] = [];
    const { plan } = await removeLeftovers({
      exec: node.exec,
      log: memoryLogger(),
      owners: ["kube-proxy"],
      dryRun: true,
      out: (t) => out.push(t),
    });
    expect(node.ran).toEqual([]);
    expect(out.map((t) => t.split("\n")[0])).toEqual(planCommands(plan).map((c) => `# ${c.argv.join(" ")}`));
  });

  test("kpng's and kube-proxy's together: what of it was kube-proxy's is told apart (--cleanup warns of it)", async () => {
    const node = fakeNode({ nftTables: "table ip kube-proxy\ntable ip kpng\n" });
    const both = await removeLeftovers({ exec: node.exec, log: memoryLogger(), owners: ["kpng", "kube-proxy"] });
    expect(both.plan.removed).toEqual(["nftables table ip kpng", "nftables table ip kube-proxy"]);
    expect(both.kubeProxyRemoved).toEqual(["nftables table ip kube-proxy"]);
    const kpngOnly = await removeLeftovers({
      exec: fakeNode({ nftTables: "table ip kpng\n" }).exec,
      log: memoryLogger(),
      owners: ["kpng", "kube-proxy"],
    });
    expect(kpngOnly.kubeProxyRemoved).toEqual([]);
  });

  test("a node with nothing of either: only reads", async () => {
    const node = fakeNode({ iptables: [dump(saved(foreignIptables()))] });
    const { plan } = await removeLeftovers({ exec: node.exec, log: memoryLogger(), owners: ["kpng", "kube-proxy"] });
    expect(emptyPlan(plan)).toBe(true);
    expect(node.ran).toEqual([]);
  });
});
