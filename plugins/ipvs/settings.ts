// kube-proxy's ipvs configuration fields beyond the scheduler, as its ipvs
// proxier applies them (pkg/proxy/ipvs/proxier.go, NewProxier and
// cleanLegacyService). Pure: the backend runs what these return.

import { BlockList, isIP } from "node:net";
import type { Config } from "../../src/host/toolkit/index.ts";
import { sysctls } from "./names.ts";

/**
 * ipvs.strictARP: answer ARP only for addresses of the receiving interface
 * (arp_ignore=1) and announce only the best local source (arp_announce=2),
 * so the service IPs bound to kube-ipvs0 are not claimed on the node's
 * links; MetalLB's layer-2 mode needs it. Upstream fails to start when it
 * cannot set them; so does kpng (they go with the required sysctls).
 */
export const strictARPSysctls: readonly [string, string][] = [
  ["net.ipv4.conf.all.arp_ignore", "1"],
  ["net.ipv4.conf.all.arp_announce", "2"],
];

/** The `sysctl -w` argv IPVS mode runs at start-up. */
export const sysctlArgv = (config: Config): string[] => [
  "sysctl",
  "-w",
  ...[...sysctls, ...(config.ipvs.strictARP ? strictARPSysctls : [])].map(([k, v]) => `${k}=${v}`),
];

/**
 * ipvs.tcpTimeout / tcpFinTimeout / udpTimeout as `ipvsadm --set TCP TCPFIN
 * UDP` (whole seconds, as upstream's uint32 conversion), or undefined when all
 * three are 0: upstream configures the timeouts only when one is set, and a 0
 * among them leaves that timeout as the kernel has it (ipvsadm(8)).
 */
export function timeoutsArgv(config: Config): string[] | undefined {
  const { tcpTimeoutSeconds = 0, tcpFinTimeoutSeconds = 0, udpTimeoutSeconds = 0 } = config.ipvs;
  const secs = [tcpTimeoutSeconds, tcpFinTimeoutSeconds, udpTimeoutSeconds].map((s) => Math.max(0, Math.floor(s)));
  if (secs.every((s) => s === 0)) return undefined;
  return ["ipvsadm", "--set", ...secs.map(String)];
}

/**
 * ipvs.excludeCIDRs: virtual servers on these addresses are never deleted by
 * kpng's clean-up of stale ones (upstream's isIPInExcludeCIDRs in
 * cleanLegacyService), whoever made them; one a Service still wants is
 * synced as any other.
 */
export function excludedAddresses(cidrs: readonly string[] = []): (ip: string) => boolean {
  if (!cidrs.length) return () => false;
  const list = new BlockList();
  for (const c of cidrs) {
    const [net, bits] = c.split("/");
    const family = isIP(net ?? "");
    if (!family) continue; // validated at start-up (config-file.ts, kube-proxy-flags.ts)
    list.addSubnet(net!, Number(bits ?? (family === 4 ? 32 : 128)), family === 4 ? "ipv4" : "ipv6");
  }
  return (ip) => {
    const family = isIP(ip);
    return family !== 0 && list.check(ip, family === 4 ? "ipv4" : "ipv6");
  };
}
