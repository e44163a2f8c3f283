// IP and CIDR helpers shared by validation, the node-local model, the config
// and the toolkit: a leaf room (src/core/net/) that imports nothing.

export type Family = "v4" | "v6";

// Hand-written checks rather than node:net's isIPv4/isIPv6: those are one
// large regular expression each, a large share of validating slices and of
// rendering them (one call per endpoint address; see docs/results/2026-11.md).
// Same answers, except that IPv6 zone ids ("fe80::1%eth0") are refused:
// Kubernetes refuses them in Services and EndpointSlices, and nft cannot
// take them.

const isDigit = (c: number) => c >= 48 && c <= 57;
const isHex = (c: number) => isDigit(c) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70);

/** dotted quad, no leading zeros (as node:net) */
export const isIPv4 = (s: string): boolean => isIPv4At(s, 0);

// The offset is a parameter of its own, not a default one of isIPv4's: JSC
// optimises a function with a default parameter far less (every endpoint
// address of a render goes through here; docs/results/2026-11.md), and a
// callback given to filter() would have taken the element's index for it.
/** a dotted quad from `from` to the end of `s` */
function isIPv4At(s: string, from: number): boolean {
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
      if (!isIPv4At(s, i)) return false;
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

export const ipFamily = (ip: string): Family | null => (isIPv4(ip) ? "v4" : isIPv6(ip) ? "v6" : null);

export const isIP = (s: string) => isIPv4(s) || isIPv6(s);

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
