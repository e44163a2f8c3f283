// Address checks for the renderer. Every address that reaches rule text goes
// through here: the brain validates its input, but a backend must never
// print a string into an nft script it has not recognised as an address.

import type { Family } from "./names.ts";

// Hand-written checks rather than node:net's isIPv4/isIPv6: those are one
// large regular expression each, a quarter of a 10,000-service render (one
// call per endpoint address). Same answers, except that IPv6 zone ids
// ("fe80::1%eth0") are refused: nft cannot take them.

const isDigit = (c: number) => c >= 48 && c <= 57;
const isHex = (c: number) => isDigit(c) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70);

/** dotted quad, no leading zeros (as node:net) */
export function isIPv4(s: string, from = 0): boolean {
  let dots = 0;
  let digits = 0;
  let value = 0;
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (isDigit(c)) {
      if (digits === 1 && value === 0) return false; // leading zero
      value = value * 10 + (c - 48);
      if (++digits > 3 || value > 255) return false;
    } else if (c === 46 && digits > 0 && dots < 3) {
      dots++;
      digits = value = 0;
    } else return false;
  }
  return dots === 3 && digits > 0;
}

/** RFC 4291 text: eight groups of 1-4 hex digits, one "::" for a run of zero groups, an optional dotted-quad tail */
export function isIPv6(s: string): boolean {
  const n = s.length;
  if (n < 2 || n > 45) return false;
  let groups = 0;
  let compressed = false;
  let i = 0;
  if (s.charCodeAt(0) === 58) {
    if (s.charCodeAt(1) !== 58) return false;
    compressed = true;
    i = 2;
  }
  while (i < n) {
    let j = i;
    while (j < n && isHex(s.charCodeAt(j))) j++;
    if (j < n && s.charCodeAt(j) === 46) {
      if (!isIPv4(s, i)) return false;
      groups += 2;
      break;
    }
    if (j === i || j - i > 4) return false;
    groups++;
    if (j === n) break;
    if (s.charCodeAt(j) !== 58) return false;
    if (s.charCodeAt(j + 1) === 58) {
      if (compressed) return false;
      compressed = true;
      i = j + 2;
    } else if (j + 1 === n) return false;
    else i = j + 1;
  }
  return compressed ? groups <= 7 : groups === 8;
}

export const isFamilyIP = (family: Family, s: string) => (family === "ip" ? isIPv4(s) : isIPv6(s));

/** "198.19.0.0/16", "2001:db8::/32" or a bare address of the family */
export function isFamilyCIDR(family: Family, s: string): boolean {
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
export function ofFamily(family: Family, ...lists: (readonly string[] | undefined)[]): string[] {
  const out: string[] = [];
  // called per service and family: plain loops, no Set for the usual 0-2 items
  for (const list of lists) if (list) for (const s of list) if (isFamilyIP(family, s) && !out.includes(s)) out.push(s);
  return out;
}

/** the first address of the family in the list */
export function firstOfFamily(family: Family, list: readonly string[] | undefined): string | undefined {
  if (list) for (const s of list) if (isFamilyIP(family, s)) return s;
  return undefined;
}

export const cidrsOfFamily = (family: Family, list: readonly string[] | undefined) => [
  ...new Set((list ?? []).filter((s) => isFamilyCIDR(family, s))),
];

/** "198.19.0.1:80" / "[2001:db8:2::1]:80": the form dnat and conntrack use */
export const hostPort = (family: Family, ip: string, port: number) => (family === "ip" ? `${ip}:${port}` : `[${ip}]:${port}`);

/** `ip` / `ip6` address match keyword of the family */
export const addrKw = (family: Family) => (family === "ip" ? "ip" : "ip6");
export const addrType = (family: Family) => (family === "ip" ? "ipv4_addr" : "ipv6_addr");
export const loopback = (family: Family) => (family === "ip" ? "127.0.0.0/8" : "::1");
/** anonymous set, or a single value when there is one */
export const setOf = (items: readonly string[]) => (items.length === 1 ? items[0] : `{ ${items.join(", ")} }`);
