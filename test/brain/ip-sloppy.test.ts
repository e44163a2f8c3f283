// k8s.io/utils/net's ParseIPSloppy / ParseCIDRSloppy and Go's printing of
// the result, as kube-proxy writes addresses into its rules. Expected values
// are what Go 1.16's net.ParseIP(s).String() and net.ParseCIDR(s)'s network
// .String() give (the parsers k8s.io/utils/net forked).

import { describe, expect, test } from "bun:test";
import { isCanonicalCIDR, isCanonicalIP, parseCIDRSloppy, parseIPSloppy } from "../../src/core/brain/k8s/ip-sloppy.ts";

const ips: Array<[string, string | null, string]> = [
  ["198.18.0.1", "198.18.0.1", "canonical IPv4"],
  ["198.018.000.001", "198.18.0.1", "leading zeros are decimal, not octal"],
  ["0000198.18.0.1", "198.18.0.1", "any number of leading zeros"],
  ["010.0.0.8", "10.0.0.8", "010 is ten"],
  ["256.0.0.1", null, "an octet past 255"],
  ["198.18.0", null, "three octets"],
  ["198.18.0.1.", null, "a trailing dot"],
  [" 198.18.0.1", null, "spaces are not trimmed"],
  ["", null, "empty"],
  ["2001:db8::1", "2001:db8::1", "canonical IPv6"],
  ["2001:DB8::1", "2001:db8::1", "uppercase"],
  ["2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1", "every group written out"],
  ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", "the first of two equal zero runs compressed"],
  ["2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1", "the longest zero run compressed"],
  ["2001:db8:1:1:1:1:0:1", "2001:db8:1:1:1:1:0:1", "a single zero group is not compressed"],
  ["::", "::", "all zeros"],
  ["::1", "::1", "loopback"],
  ["::ffff:198.18.0.1", "198.18.0.1", "IPv4-mapped: Go reads it as IPv4"],
  ["::ffff:c612:1", "198.18.0.1", "IPv4-mapped in hex"],
  ["::198.18.0.1", "::c612:1", "IPv4-compatible: IPv6"],
  ["00002001:db8::1", "2001:db8::1", "a group of more than four digits that fits 16 bits"],
  ["12345::1", null, "a group past 16 bits"],
  ["fe80::1%eth0", null, "a zone"],
  ["1::2::3", null, "two ::"],
  ["1:2:3:4:5:6:7:8:9", null, "nine groups"],
];

const cidrs: Array<[string, string | null, string]> = [
  ["198.18.128.0/24", "198.18.128.0/24", "canonical"],
  ["198.18.128.77/24", "198.18.128.0/24", "host bits masked"],
  ["198.018.128.000/024", "198.18.128.0/24", "leading zeros in address and prefix"],
  ["198.18.0.0/33", null, "prefix past 32"],
  ["198.18.0.0", null, "no prefix"],
  ["198.18.0.0/", null, "empty prefix"],
  ["198.18.0.0/24 ", null, "spaces are not trimmed (kube-proxy trims source ranges first)"],
  ["2001:DB8::1/32", "2001:db8::/32", "IPv6, masked, lowercase"],
  ["2001:db8::/129", null, "prefix past 128"],
  ["::ffff:198.18.0.1/120", "198.18.0.0/24", "IPv4-mapped: Go prints the IPv4 network"],
  ["0.0.0.0/0", "0.0.0.0/0", "everything"],
];

describe("parseIPSloppy", () => {
  for (const [s, want, why] of ips)
    test(`${JSON.stringify(s)} -> ${want}: ${why}`, () => {
      expect(parseIPSloppy(s)).toBe(want);
      expect(isCanonicalIP(s)).toBe(want === s);
    });
});

describe("parseCIDRSloppy", () => {
  for (const [s, want, why] of cidrs)
    test(`${JSON.stringify(s)} -> ${want}: ${why}`, () => {
      expect(parseCIDRSloppy(s)).toBe(want);
      expect(isCanonicalCIDR(s)).toBe(want === s);
    });
});

test("isCanonicalIP agrees with parseIPSloppy over every spelling of every zero-run pattern", () => {
  // each of the 8 groups zero, one or ffff (IPv4-mapped ones among them), in every combination, each
  // written out in full and with every run of zero groups written as "::": every compression case
  const values = ["0", "1", "ffff"];
  let spellings = 0;
  for (let n = 0; n < 3 ** 8; n++) {
    const groups = Array.from({ length: 8 }, (_, i) => values[Math.floor(n / 3 ** i) % 3]);
    const written = [groups.join(":")];
    for (let a = 0; a < 8; a++)
      for (let b = a + 1; b <= 8 && groups[b - 1] === "0"; b++)
        written.push(`${groups.slice(0, a).join(":")}::${groups.slice(b).join(":")}`);
    for (const w of written) {
      spellings++;
      expect(isCanonicalIP(w)).toBe(parseIPSloppy(w) === w);
    }
  }
  expect(spellings).toBeGreaterThan(20_000);
});
