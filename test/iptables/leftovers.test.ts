// What the iptables backend says it leaves behind (its index.ts, read by the
// host's leftovers sweep): every chain and set it writes is kpng's, kube-proxy's
// iptables-mode chains are kube-proxy's, and kubelet's or other software's are
// no one's; the restore removing chains keeps one another program still reaches.

import { describe, expect, test } from "bun:test";
import { IPTABLES_FOOTPRINT, type IptTable, restoreRemovingChains } from "../../plugins/iptables/index.ts";
import { fixedChains, hairpinSets, servicePrefix, tables } from "../../plugins/iptables/names.ts";

const kpng = IPTABLES_FOOTPRINT.kpng;
const kubeProxy = IPTABLES_FOOTPRINT["kube-proxy"];

describe("the iptables footprint", () => {
  test("kpng's: every fixed chain of every table, every per-service chain kind and both hairpin sets", () => {
    const chains = tables.flatMap((t) => fixedChains[t].map((c) => [t, c] as const));
    const perService = Object.values(servicePrefix).map((p) => ["nat", `${p}ABCDEFGHIJKLMNOP`] as const);
    expect([...chains, ...perService].filter(([t, c]) => !kpng.ownsChain(t, c))).toEqual([]);
    expect(Object.values(hairpinSets).every((s) => kpng.ownsIpset(s))).toBe(true);
  });

  const cases: Array<{ name: string; table: IptTable; chain: string; kubeProxy: boolean }> = [
    { name: "KUBE-SERVICES of nat is kube-proxy's", table: "nat", chain: "KUBE-SERVICES", kubeProxy: true },
    { name: "a per-service chain of nat is kube-proxy's", table: "nat", chain: "KUBE-SVC-CDGGSHYLG3RE2FKL", kubeProxy: true },
    { name: "KUBE-XLB- (before 1.24) is kube-proxy's", table: "nat", chain: "KUBE-XLB-CDGGSHYLG3RE2FKL", kubeProxy: true },
    { name: "a KUBE-SVC- name outside nat is no service chain", table: "filter", chain: "KUBE-SVC-CDGGSHYLG3RE2FKL", kubeProxy: false },
    { name: "the canary of mangle is kube-proxy's", table: "mangle", chain: "KUBE-PROXY-CANARY", kubeProxy: true },
    { name: "kubelet's KUBE-FIREWALL stays", table: "filter", chain: "KUBE-FIREWALL", kubeProxy: false },
    { name: "kubelet's KUBE-KUBELET-CANARY stays", table: "nat", chain: "KUBE-KUBELET-CANARY", kubeProxy: false },
    { name: "KUBE-MARK-DROP stays (kubelet made it too)", table: "nat", chain: "KUBE-MARK-DROP", kubeProxy: false },
    { name: "kube-router's chains stay", table: "filter", chain: "KUBE-ROUTER-INPUT", kubeProxy: false },
  ];
  for (const c of cases)
    test(c.name, () => {
      expect(kubeProxy.ownsChain(c.table, c.chain)).toBe(c.kubeProxy);
      expect(kpng.ownsChain(c.table, c.chain)).toBe(false);
    });

  test("kube-proxy's iptables mode owns no ipset; kpng's KPNG- chains are not kube-proxy's", () => {
    expect(kubeProxy.ownsIpset("KUBE-CLUSTER-IP")).toBe(false);
    expect(kubeProxy.ownsChain("nat", "KPNG-SERVICES")).toBe(false);
  });
});

describe("the restore removing chains", () => {
  const save = `*nat
:PREROUTING ACCEPT [0:0]
:KPNG-SERVICES - [0:0]
:KPNG-SVC-A - [0:0]
:KPNG-HELD - [0:0]
:KPNG-HELD-INNER - [0:0]
:CNI-X - [0:0]
-A PREROUTING -j KPNG-SERVICES
-A KPNG-SERVICES -j KPNG-SVC-A
-A CNI-X -j KPNG-HELD
-A KPNG-HELD -j KPNG-HELD-INNER
COMMIT
`;
  const owns = (t: IptTable, c: string) => kpng.ownsChain(t, c);

  test("removes the jump from the built-in chain and the chains; keeps a chain another program reaches, with what it reaches", () => {
    const r = restoreRemovingChains(save, owns, "iptables-nft v4");
    // a chain declared in a --noflush restore is flushed, so `:` then `-X` deletes it whatever it held
    expect(r.input).toBe(
      "*nat\n-D PREROUTING -j KPNG-SERVICES\n:KPNG-SERVICES - [0:0]\n:KPNG-SVC-A - [0:0]\n-X KPNG-SERVICES\n-X KPNG-SVC-A\nCOMMIT\n",
    );
    expect(r.removed).toEqual(["iptables-nft v4 nat: 2 chains (KPNG-SERVICES KPNG-SVC-A), 1 jumps from built-in chains"]);
    expect(r.kept.sort()).toEqual([
      "iptables-nft v4 nat KPNG-HELD-INNER: another program's chain still reaches it",
      "iptables-nft v4 nat KPNG-HELD: another program's chain still reaches it",
    ]);
  });

  test("nothing owned: no input", () => {
    expect(restoreRemovingChains(save, () => false, "x")).toEqual({ input: "", removed: [], kept: [] });
  });
});
