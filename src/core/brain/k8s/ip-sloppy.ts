// IPs and CIDRs read as kube-proxy reads them: k8s.io/utils/net's
// ParseIPSloppy / ParseCIDRSloppy (Go 1.16's net.ParseIP, before it refused
// leading zeros: "010.0.0.1" is 10.0.0.1, decimal, as API servers stored it
// before their stricter validation), printed as Go's net.IP.String() prints
// them (kube-proxy writes its rules from the parsed value): lowercase IPv6,
// the longest run of zero groups as "::", an IPv4-mapped IPv6 address as the
// IPv4 address it maps (Go counts it as IPv4). A CIDR comes out masked to
// its network, as net.IPNet.String() prints it.
//
// The fast path (fast-service.ts, fast-slice.ts) takes only text already in
// that form (isCanonicalIP, isCanonicalCIDR), so that what it passes through
// unchanged is what this would have made of it.

import { isIPv4 } from "../../net/ip.ts";

const isDigit = (c: number) => c >= 48 && c <= 57;
const hexValue = (c: number) => (isDigit(c) ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1);

/** Go's dtoi: decimal digits from `i`, any number of them; [value, end] or null (none, or too big) */
function decimal(s: string, i: number, end: number): [number, number] | null {
  let n = 0;
  let j = i;
  for (; j < end && isDigit(s.charCodeAt(j)); j++) {
    n = n * 10 + (s.charCodeAt(j) - 48);
    if (n >= 0xffffff) return null;
  }
  return j === i ? null : [n, j];
}

/** sloppy dotted quad in s[from, end): 4 bytes written at out[at..], or false */
function parseV4(s: string, from: number, end: number, out: Uint8Array, at: number): boolean {
  let i = from;
  for (let k = 0; k < 4; k++) {
    if (k > 0) {
      if (i >= end || s.charCodeAt(i) !== 46) return false;
      i++;
    }
    const d = decimal(s, i, end);
    if (!d || d[0] > 255) return false;
    out[at + k] = d[0];
    i = d[1];
  }
  return i === end;
}

/** sloppy IPv6 in s[from, end) (groups of any number of hex digits up to 0xffff, an IPv4 tail) into out (16 bytes), or false */
function parseV6(s: string, from: number, end: number, out: Uint8Array): boolean {
  out.fill(0);
  let ellipsis = -1;
  let i = from;
  if (end - i >= 2 && s.charCodeAt(i) === 58 && s.charCodeAt(i + 1) === 58) {
    ellipsis = 0;
    i += 2;
    if (i === end) return true;
  }
  let k = 0; // bytes written
  while (k < 16) {
    let n = 0;
    let j = i;
    for (; j < end; j++) {
      const h = hexValue(s.charCodeAt(j));
      if (h < 0) break;
      n = n * 16 + h;
      if (n > 0xffff) return false;
    }
    if (j === i) return false;
    if (j < end && s.charCodeAt(j) === 46) {
      // an IPv4 tail: only as the last 4 bytes
      if ((ellipsis < 0 && k !== 12) || k + 4 > 16) return false;
      if (!parseV4(s, i, end, out, k)) return false;
      k += 4;
      i = end;
      break;
    }
    out[k] = n >> 8;
    out[k + 1] = n & 0xff;
    k += 2;
    i = j;
    if (i === end) break;
    if (s.charCodeAt(i) !== 58 || i + 1 === end) return false;
    i++;
    if (s.charCodeAt(i) === 58) {
      if (ellipsis >= 0) return false;
      ellipsis = k;
      i++;
      if (i === end) break;
    }
  }
  if (i !== end) return false;
  if (k < 16) {
    if (ellipsis < 0) return false;
    // move the bytes after the "::" to the end
    const tail = k - ellipsis;
    for (let t = tail - 1; t >= 0; t--) out[16 - tail + t] = out[ellipsis + t];
    for (let t = ellipsis; t < 16 - tail; t++) out[t] = 0;
  } else if (ellipsis >= 0) return false; // "::" must stand for at least one group
  return true;
}

const isMapped = (b: Uint8Array) => {
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return false;
  return b[10] === 0xff && b[11] === 0xff;
};

/** Go's IPv6 text: lowercase, no leading zeros, the first longest run (>= 2) of zero groups as "::" */
function formatV6(b: Uint8Array): string {
  let best = -1;
  let bestLen = 0;
  for (let g = 0; g < 8; ) {
    if (b[2 * g] === 0 && b[2 * g + 1] === 0) {
      let e = g;
      while (e < 8 && b[2 * e] === 0 && b[2 * e + 1] === 0) e++;
      if (e - g >= 2 && e - g > bestLen) [best, bestLen] = [g, e - g];
      g = e;
    } else g++;
  }
  let out = "";
  for (let g = 0; g < 8; g++) {
    if (g === best) {
      out += "::";
      g += bestLen - 1;
      continue;
    }
    if (out && !out.endsWith(":")) out += ":";
    out += ((b[2 * g] << 8) | b[2 * g + 1]).toString(16);
  }
  return out;
}

const v4Text = (b: Uint8Array, at: number) => `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;

const scratch = new Uint8Array(16);

/** ParseIPSloppy(s).String(): the address as kube-proxy programs it, or null when it is no IP */
export function parseIPSloppy(s: string): string | null {
  if (parseV4(s, 0, s.length, scratch, 0)) return v4Text(scratch, 0);
  if (!parseV6(s, 0, s.length, scratch)) return null;
  return isMapped(scratch) ? v4Text(scratch, 12) : formatV6(scratch);
}

/** ParseCIDRSloppy(s) network's String(): "10.1.2.3/8" is "10.0.0.0/8"; null when it is no CIDR */
export function parseCIDRSloppy(s: string): string | null {
  const slash = s.indexOf("/");
  if (slash < 0) return null;
  let bits: number;
  if (parseV4(s, 0, slash, scratch, 12)) {
    scratch.fill(0, 0, 10);
    scratch[10] = scratch[11] = 0xff;
    bits = 32;
  } else if (parseV6(s, 0, slash, scratch)) bits = 128;
  else return null;
  const d = decimal(s, slash + 1, s.length);
  if (!d || d[1] !== s.length || d[0] > bits) return null;
  // an IPv4 CIDR's mask covers the last 4 bytes only
  const prefix = d[0] + (bits === 32 ? 96 : 0);
  for (let i = 0; i < 16; i++) {
    const keep = Math.max(0, Math.min(8, prefix - 8 * i));
    scratch[i] &= (0xff << (8 - keep)) & 0xff;
  }
  // Go prints an IPv4(-mapped) network as IPv4 with the mask's last 32 bits (net.IPNet.String)
  if (isMapped(scratch)) return `${v4Text(scratch, 12)}/${prefix - 96}`;
  return `${formatV6(scratch)}/${prefix}`;
}

/** whether parseIPSloppy(s) === s, without making a string (IPv4: no leading zeros) */
export function isCanonicalIP(s: string): boolean {
  return isIPv4(s) || isCanonicalIPv6(s);
}

/**
 * IPv6 text exactly as formatV6 writes it (and not an IPv4-mapped address,
 * which Go prints as IPv4). One pass, no parse: 100,000 slice addresses at
 * 10k services go through it at start-up.
 */
export function isCanonicalIPv6(s: string): boolean {
  const n = s.length;
  if (n < 2 || n > 39) return false;
  let groups = 0;
  /** explicit groups before the "::", -1 without one */
  let compressedAt = -1;
  /** the run of explicit zero groups going on, and the longest before and after the "::" */
  let run = 0;
  let longestBefore = 0;
  let longestAfter = 0;
  let firstAfterCompression = false;
  let mappedPrefix = false;
  let i = 0;
  if (s.charCodeAt(0) === 58) {
    if (s.charCodeAt(1) !== 58) return false;
    compressedAt = 0;
    firstAfterCompression = true;
    i = 2;
    if (i === n) return true; // "::"
  }
  for (;;) {
    const start = i;
    let zero = true;
    for (; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c === 48) continue;
      if ((c > 48 && c <= 57) || (c >= 97 && c <= 102)) zero = false;
      else break;
    }
    const len = i - start;
    if (len === 0 || len > 4 || (len > 1 && s.charCodeAt(start) === 48)) return false; // no group, too long, a leading zero
    if (++groups > 8) return false;
    if (zero) {
      if (firstAfterCompression) return false; // the zero run would be longer than the "::" shows
      run++;
    } else run = 0;
    if (firstAfterCompression && compressedAt === 0 && len === 4 && s.startsWith("ffff", start)) mappedPrefix = true;
    firstAfterCompression = false;
    if (compressedAt < 0) longestBefore = Math.max(longestBefore, run);
    else longestAfter = Math.max(longestAfter, run);
    if (i === n) break;
    if (s.charCodeAt(i) !== 58 || i + 1 === n) return false; // uppercase, a dotted tail, a zone, a trailing ':'
    i++;
    if (s.charCodeAt(i) === 58) {
      if (compressedAt >= 0 || run) return false; // a second "::", or one next to a zero group
      compressedAt = groups;
      firstAfterCompression = true;
      run = 0;
      i++;
      if (i === n) break;
    }
  }
  if (compressedAt < 0) return groups === 8 && longestBefore < 2;
  const compressed = 8 - groups;
  // Go compresses the first longest run of two or more zero groups
  return compressed >= 2 && longestBefore < compressed && longestAfter <= compressed && !(mappedPrefix && groups === 3);
}

/** whether parseCIDRSloppy(s) === s: a canonical address with no bits set past the prefix, a prefix without leading zeros */
export function isCanonicalCIDR(s: string): boolean {
  const slash = s.indexOf("/");
  if (slash < 0) return false;
  const bits = s.slice(slash + 1);
  if (!/^(0|[1-9]\d{0,2})$/.test(bits)) return false;
  return parseCIDRSloppy(s) === s;
}
