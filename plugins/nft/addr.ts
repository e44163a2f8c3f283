// Address checks for the renderer. Every address that reaches rule text goes
// through here: the brain validates its input, but a backend must never
// print a string into an nft script it has not recognised as an address.

import { canonicalIP, cidrsOf, type Family, ipv6Text, isIPv4, isIPv6 } from "../../src/host/toolkit/index.ts";
import type { TableFamily } from "./names.ts";

/** the address check of a family, chosen once for a loop (a render checks 100,000s of endpoint addresses) */
const checkOf = (family: TableFamily) => (family === "ip" ? isIPv4 : isIPv6);

/**
 * Keeps the addresses of one family from the list (and the next), in order, without duplicates. IPv6 text
 * is used as spelled (canonicalising 100,000 endpoint addresses costs as much
 * as the rest of a render); the API server holds one spelling per object.
 */
export function ofFamily(family: TableFamily, list: readonly string[] | undefined, more?: readonly string[]): string[] {
  const out: string[] = [];
  // called per service and family: plain loops, no Set for the usual 0-2 items, no array of the lists
  const ok = checkOf(family);
  if (list) for (const s of list) if (ok(s) && !out.includes(s)) out.push(s);
  if (more) for (const s of more) if (ok(s) && !out.includes(s)) out.push(s);
  return out;
}

/** the first address of the family in the list */
export function firstOfFamily(family: TableFamily, list: readonly string[] | undefined): string | undefined {
  if (!list) return undefined;
  const ok = checkOf(family);
  for (let i = 0; i < list.length; i++) if (ok(list[i])) return list[i];
  return undefined;
}

/** the family's CIDRs (or bare addresses) in the list, without duplicates */
export const cidrsOfFamily = (family: TableFamily, list: readonly string[] | undefined) => [
  ...new Set(cidrsOf(list, addressFamily(family))),
];

/** the address family of a table family */
export const addressFamily = (family: TableFamily): Family => (family === "ip" ? "v4" : "v6");

/** `ip` / `ip6` address match keyword of the family */
export const addrKw = (family: TableFamily) => (family === "ip" ? "ip" : "ip6");
export const addrType = (family: TableFamily) => (family === "ip" ? "ipv4_addr" : "ipv6_addr");
export const loopback = (family: TableFamily) => (family === "ip" ? "127.0.0.0/8" : "::1");
/** nodePortAddresses entries of loopback addresses only (inside 127.0.0.0/8, or ::1): node ports never answer there */
export const loopbackEntries = (list: readonly string[]) =>
  list.filter((a) => {
    const net = a.split("/")[0] ?? a;
    return net.startsWith("127.") || net === "::1";
  });
/** anonymous set, or a single value when there is one */
export const setOf = (items: readonly string[]) => (items.length === 1 ? items[0] : `{ ${items.join(", ")} }`);

/**
 * An IPv6 address in RFC 5952 text (ipv6Text), as nft prints it and the
 * kernel's bytes read back. By hand: `verify` spells 100,000s of addresses,
 * and node:url's parser (canonicalIP) costs far more. What does not parse as
 * one comes back lowercased.
 */
export function canonicalIPv6(s: string): string {
  if (s.includes(".")) return canonicalIP(s); // an IPv4 tail: rare, node:url's parser
  const gap = s.indexOf("::");
  const head = gap < 0 ? s : s.slice(0, gap);
  const tail = gap < 0 ? "" : s.slice(gap + 2);
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  if (h.length + t.length > (gap < 0 ? 8 : 7) || (gap < 0 && h.length !== 8)) return s.toLowerCase();
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill("0"), ...t].map((x) =>
    /^[0-9a-fA-F]{1,4}$/.test(x) ? parseInt(x, 16) : NaN,
  );
  return groups.some(Number.isNaN) ? s.toLowerCase() : ipv6Text(groups);
}
