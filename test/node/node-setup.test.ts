// Which backends get kube-proxy's conntrack sysctls: those that program
// netfilter, as kube-proxy sets them for each of its Linux modes.

import { expect, test } from "bun:test";
import { usesConntrack } from "../../src/core/node/node-setup.ts";

const cases: Array<{ name: string; backends: string[]; want: boolean }> = [
  { name: "nft, iptables, ipvs and ebpf rely on conntrack", backends: ["nft", "iptables", "ipvs", "ebpf"], want: true },
  { name: "one netfilter backend among others is enough", backends: ["userspace", "iptables"], want: true },
  { name: "userspace and winkernel do not", backends: ["userspace", "winkernel"], want: false },
  { name: "plugins only (no built-in names): not set", backends: [], want: false },
];
for (const c of cases) test(c.name, () => expect(usesConntrack(c.backends)).toBe(c.want));
