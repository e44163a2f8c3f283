// What the IPVS backend says it, and kube-proxy's IPVS mode, leave behind (its
// index.ts, read by the host's leftovers sweep): the sets and chains each owns,
// and which virtual servers the ipvsadm input removes.

import { describe, expect, test } from "bun:test";
import { IPVS_DEVICE, IPVS_FOOTPRINT, virtualServersRemoving } from "../../plugins/ipvs/index.ts";
import { chains, dummyInterface, setIds, setName } from "../../plugins/ipvs/names.ts";
import { FAMILIES } from "../../src/host/toolkit/index.ts";

const kpng = IPVS_FOOTPRINT.kpng;
const kubeProxy = IPVS_FOOTPRINT["kube-proxy"];

describe("the IPVS footprint", () => {
  test("kpng's: every set of both families and every chain the backend writes; the device keeps upstream's name", () => {
    const sets = setIds.flatMap((id) => FAMILIES.map((f) => setName(id, f)));
    expect(sets.filter((s) => !kpng.ownsIpset(s))).toEqual([]);
    expect(Object.values(chains).filter((c) => !kpng.ownsChain("nat", c))).toEqual([]);
    expect(IPVS_DEVICE).toBe(dummyInterface);
    expect(IPVS_DEVICE).toBe("kube-ipvs0");
  });

  test("kube-proxy's IPv6 sets are KUBE-6-, cut to ipset's 31 characters (pkg/proxy/ipvs/ipset.go)", () => {
    expect(kubeProxy.ownsIpset("KUBE-6-CLUSTER-IP")).toBe(true);
    expect(kubeProxy.ownsIpset("KUBE-6-LOAD-BALANCER-SOURCE-CID")).toBe(true); // KUBE-6-LOAD-BALANCER-SOURCE-CIDR is 32
    expect(kubeProxy.ownsIpset("KUBE-6-LOAD-BALANCER-SOURCE-CIDR")).toBe(false);
  });

  test("kube-router's sets and kpng's are not kube-proxy's; kube-proxy's IPVS-mode chains are", () => {
    expect(kubeProxy.ownsIpset("KUBE-SRC-RN7WVLPO")).toBe(false);
    expect(kubeProxy.ownsIpset("KPNG-CLUSTER-IP")).toBe(false);
    expect(kubeProxy.ownsChain("filter", "KUBE-IPVS-FILTER")).toBe(true);
    expect(kubeProxy.ownsChain("nat", "KUBE-LOAD-BALANCER")).toBe(true);
    expect(kubeProxy.ownsChain("filter", "KUBE-FIREWALL")).toBe(false);
  });
});

describe("the virtual servers removed", () => {
  const ipvs = `-A -t 10.96.0.10:80 -s rr
-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1
-A -t 192.0.2.10:30080 -s rr
-A -u 192.0.2.10:30053 -s rr
-A -t 192.0.2.10:30081 -s rr
-A -t 203.0.113.5:443 -s wlc
`;
  const listing = {
    ipvs,
    deviceAddrs: `[{"ifname":"kube-ipvs0","addr_info":[{"family":"inet","local":"10.96.0.10","prefixlen":32}]}]`,
    sets: new Map([
      ["KUBE-NODE-PORT-TCP", ["30080"]],
      ["KPNG-NODE-PORT", ["192.0.2.10,udp:30053"]],
    ]),
  };

  test("kube-proxy's: on kube-ipvs0's addresses and its node ports; another program's stays", () => {
    expect(virtualServersRemoving(listing, ["kube-proxy"])).toEqual({ input: "-D -t 10.96.0.10:80\n-D -t 192.0.2.10:30080\n", count: 2 });
  });

  test("kpng's: on kube-ipvs0's addresses and the ip,proto:port of KPNG-NODE-PORT", () => {
    expect(virtualServersRemoving(listing, ["kpng"])).toEqual({ input: "-D -t 10.96.0.10:80\n-D -u 192.0.2.10:30053\n", count: 2 });
  });

  test("nothing listed: nothing removed", () => {
    expect(virtualServersRemoving({ ipvs: "", deviceAddrs: "", sets: new Map() }, ["kpng", "kube-proxy"])).toEqual({ input: "", count: 0 });
  });
});
