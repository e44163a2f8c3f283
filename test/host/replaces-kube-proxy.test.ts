// kube-proxy's rules are removed at start-up only by backends that replace
// one of its modes (nftables, iptables, ipvs).

import { expect, test } from "bun:test";
import { replacesKubeProxy } from "../../src/host/cleanup.ts";

const cases: Array<{ name: string; backends: string[]; want: boolean }> = [
  { name: "nft replaces kube-proxy's nftables mode", backends: ["nft"], want: true },
  { name: "iptables and ipvs replace their modes", backends: ["iptables", "ipvs"], want: true },
  {
    name: "ebpf, userspace, winkernel and plugins leave kube-proxy's rules alone",
    backends: ["ebpf", "userspace", "winkernel", "my-plugin"],
    want: false,
  },
];
for (const c of cases) test(c.name, () => expect(replacesKubeProxy(c.backends)).toBe(c.want));
