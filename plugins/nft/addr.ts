// Address checks for the renderer. Every address that reaches rule text goes
// through here: the brain validates its input, but a backend must never
// print a string into an nft script it has not recognised as an address.

import { type Family, isIPv4, isIPv6 } from "../../src/plugins/toolkit/index.ts";
import type { TableFamily } from "./names.ts";

export const isFamilyIP = (family: TableFamily, s: string) => (family === "ip" ? isIPv4(s) : isIPv6(s));

/** "198.19.0.0/16", "2001:db8::/32" or a bare address of the family */
export function isFamilyCIDR(family: TableFamily, s: string): boolean {
  const slash = s.indexOf("/");
  if (slash < 0) return isFamilyIP(family, s);
  const bits = s.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > (family === "ip" ? 32 : 128)) return false;
  return isFamilyIP(family, s.slice(0, slash));
}

/**
 * Keeps the addresses of one family from the lists, in order, without duplicates. IPv6 text
 * is used as spelled (canonicalising 100,000 endpoint addresses costs as much
 * as the rest of a render); the API server holds one spelling per object.
 */
export function ofFamily(family: TableFamily, ...lists: (readonly string[] | undefined)[]): string[] {
  const out: string[] = [];
  // called per service and family: plain loops, no Set for the usual 0-2 items
  for (const list of lists) if (list) for (const s of list) if (isFamilyIP(family, s) && !out.includes(s)) out.push(s);
  return out;
}

/** the first address of the family in the list */
export function firstOfFamily(family: TableFamily, list: readonly string[] | undefined): string | undefined {
  if (list) for (const s of list) if (isFamilyIP(family, s)) return s;
  return undefined;
}

export const cidrsOfFamily = (family: TableFamily, list: readonly string[] | undefined) => [
  ...new Set((list ?? []).filter((s) => isFamilyCIDR(family, s))),
];

/** the address family of a table family */
export const addressFamily = (family: TableFamily): Family => (family === "ip" ? "v4" : "v6");

/** `ip` / `ip6` address match keyword of the family */
export const addrKw = (family: TableFamily) => (family === "ip" ? "ip" : "ip6");
export const addrType = (family: TableFamily) => (family === "ip" ? "ipv4_addr" : "ipv6_addr");
export const loopback = (family: TableFamily) => (family === "ip" ? "127.0.0.0/8" : "::1");
/** anonymous set, or a single value when there is one */
export const setOf = (items: readonly string[]) => (items.length === 1 ? items[0] : `{ ${items.join(", ")} }`);
