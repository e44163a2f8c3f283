// The IP and CIDR helpers (src/core/net/ip.ts): hand-written for speed, they
// give node:net's answers, except that zone ids are refused (Kubernetes
// refuses them in Services and EndpointSlices, and nft cannot take them).

import { describe, expect, test } from "bun:test";
import { isIPv4 as netIsIPv4, isIPv6 as netIsIPv6 } from "node:net";
import { byFamily, cidrFamily, ipFamily, isCIDR, isIPv4, isIPv6 } from "../../src/core/net/ip.ts";

const spellings = [
  "10.0.0.1",
  "0.0.0.0",
  "255.255.255.255",
  "256.0.0.1",
  "10.0.0",
  "10.0.0.1.",
  "010.0.0.1",
  "1.2.3.04",
  " 10.0.0.1",
  "::",
  "::1",
  "2001:db8::1",
  "2001:db8:0:0:0:0:0:1",
  "2001:db8::1::2",
  "::ffff:10.0.0.1",
  "2001:db8:0:0:0:0:0:0:1",
  "12345::1",
  "g::1",
  ":1",
  "1:",
  "",
];

describe("the same answers as node:net", () => {
  test.each(spellings)("%p", (s) => {
    expect({ v4: isIPv4(s), v6: isIPv6(s) }).toEqual({ v4: netIsIPv4(s), v6: netIsIPv6(s) });
  });

  test("but a zone id is refused", () => {
    expect(netIsIPv6("fe80::1%eth0")).toBe(true);
    expect(isIPv6("fe80::1%eth0")).toBe(false);
  });
});

describe("families and CIDRs", () => {
  test.each([
    ["10.0.0.0/8", true, "v4"],
    ["10.0.0.0/32", true, "v4"],
    ["10.0.0.0/33", false, null],
    ["2001:db8::/32", true, "v6"],
    ["2001:db8::/128", true, "v6"],
    ["2001:db8::/129", false, null],
    ["10.0.0.0", false, null],
    ["10.0.0.0/", false, null],
    ["10.0.0.0/-1", false, null],
  ] as const)("%p: CIDR %p, family %p", (s, cidr, family) => {
    expect(isCIDR(s)).toBe(cidr);
    expect(cidrFamily(s)).toBe(family);
  });

  test("an address's family; byFamily keeps order and drops what is not an IP", () => {
    expect([ipFamily("10.0.0.1"), ipFamily("2001:db8::1"), ipFamily("x")]).toEqual(["v4", "v6", null]);
    expect(byFamily(["2001:db8::2", "10.0.0.2", "nope", "10.0.0.1", "2001:db8::1"])).toEqual({
      V4: ["10.0.0.2", "10.0.0.1"],
      V6: ["2001:db8::2", "2001:db8::1"],
    });
  });
});
