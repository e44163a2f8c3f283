// IP and CIDR helpers shared by validation and the node-local model.

import { isIPv4, isIPv6 } from "node:net";

export type Family = "v4" | "v6";

export const ipFamily = (ip: string): Family | null => (isIPv4(ip) ? "v4" : isIPv6(ip) ? "v6" : null);

/** `a.b.c.d/n` or `x::/n` with a prefix length valid for the family. */
export function isCIDR(s: string): boolean {
  const slash = s.indexOf("/");
  if (slash < 0) return false;
  const fam = ipFamily(s.slice(0, slash));
  const bits = s.slice(slash + 1);
  if (!fam || !/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (fam === "v4" ? 32 : 128);
}

export const cidrFamily = (s: string): Family | null => (isCIDR(s) ? ipFamily(s.slice(0, s.indexOf("/"))) : null);

/** Splits addresses by family, dropping anything that is not an IP. */
export function byFamily(ips: readonly string[]): { V4: string[]; V6: string[] } {
  const out = { V4: [] as string[], V6: [] as string[] };
  for (const ip of ips) {
    const f = ipFamily(ip);
    if (f === "v4") out.V4.push(ip);
    else if (f === "v6") out.V6.push(ip);
  }
  return out;
}
