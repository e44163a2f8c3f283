// Address families and addresses, the way every backend reads them from the
// node-local state. A family is "v4" or "v6" everywhere; a backend that
// speaks another dialect to its kernel (nft's `ip`/`ip6` tables, IPVS's
// `inet`/`inet6` sets, a BPF map's 4/6 byte) translates at that edge.

import type { IPSet } from "../../gen/localv1/services_pb.ts";
// the brain's own checks: hand-written, far faster than node:net's on the hot paths of a render
import { ipFamily, isIPv4, isIPv6, type Family } from "../../core/net/ip.ts";

export { ipFamily, isIPv4, isIPv6, type Family };

/** both families, IPv4 first: the order backends render them in */
export const FAMILIES: readonly Family[] = ["v4", "v6"];

const NONE: readonly string[] = Object.freeze([]);

/**
 * The addresses of `family` in an IPSet, in order. The brain puts each
 * address under its family already; anything that is not an address of the
 * family is left out all the same, since a backend must never print a string
 * into a rule it has not recognised as an address. The usual all-valid list
 * is returned as it is (no copy).
 */
export function ipsOf(set: IPSet | undefined, family: Family): readonly string[] {
  const list = family === "v4" ? set?.V4 : set?.V6;
  if (!list?.length) return NONE;
  const ok = family === "v4" ? isIPv4 : isIPv6;
  for (const ip of list) if (!ok(ip)) return list.filter(ok);
  return list;
}

/**
 * The CIDRs of `family` in a list (cluster CIDRs, source ranges,
 * --nodeport-addresses), in order: `addr/bits` with a prefix length the
 * family allows, or a bare address. Anything else is left out.
 */
export function cidrsOf(list: readonly string[] | undefined, family: Family): string[] {
  const ok = family === "v4" ? isIPv4 : isIPv6;
  const max = family === "v4" ? 32 : 128;
  return (list ?? []).filter((c) => {
    const slash = c.indexOf("/");
    if (slash < 0) return ok(c);
    const bits = c.slice(slash + 1);
    return /^\d{1,3}$/.test(bits) && Number(bits) <= max && ok(c.slice(0, slash));
  });
}

/** the addresses of both families, IPv4 first */
export const allIPs = (set: IPSet | undefined): string[] => [...ipsOf(set, "v4"), ...ipsOf(set, "v6")];

/**
 * The family of an address already recognised as one (node IPs, an IPSet's
 * entries): a colon is enough, and far cheaper than parsing it again.
 */
export const familyOf = (ip: string): Family => (ip.includes(":") ? "v6" : "v4");

/**
 * RFC 5952 text of an IPv6 address's eight 16-bit groups: lowercase hex, the
 * first longest run of two or more zero groups as "::" (how the kernel's
 * bytes read back: a BPF map's, a netlink dump's). Plain loops and string
 * appends: 100,000s of addresses are read back at scale.
 */
export function ipv6Text(g: ArrayLike<number>): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  let out = "";
  for (let i = 0; i < 8; i++) {
    if (i === best) {
      out += "::";
      i += bestLen - 1;
      continue;
    }
    if (i > 0 && i !== best + bestLen) out += ":";
    out += g[i].toString(16);
  }
  return out;
}

/** "198.19.0.1:80" / "[2001:db8:2::1]:80": how DNAT targets, conntrack and logs write an endpoint */
export const hostPort = (ip: string, port: number) => (ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`);

/** "198.19.0.1:53" / "[2001:db8:2::1]:53" -> { ip, port }; undefined when it is not one of those */
export function splitHostPort(s: string): { ip: string; port: number } | undefined {
  const i = s.lastIndexOf(":");
  const digits = s.slice(i + 1);
  if (i <= 0 || !/^\d+$/.test(digits)) return undefined;
  const bracketed = s.charCodeAt(0) === 91; // "["
  if (bracketed ? s.charCodeAt(i - 1) !== 93 || i < 3 : s.lastIndexOf(":", i - 1) >= 0) return undefined;
  return { ip: bracketed ? s.slice(1, i - 1) : s.slice(0, i), port: Number(digits) };
}

/** 4 or 6: a family where the outside spells it as a number (`conntrack -f`, the metrics hooks, a BPF map key) */
export type IPVersion = 4 | 6;

export const ipVersion = (family: Family): IPVersion => (family === "v4" ? 4 : 6);
