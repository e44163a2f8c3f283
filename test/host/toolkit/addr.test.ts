// The backends' address checks (the toolkit's isIPv4/isIPv6) give node:net's
// answers, but for IPv6 zone ids, which nft cannot take: named edge cases,
// then generated addresses (valid ones, compressed, with a dotted tail,
// and mutated ones).

import { describe, expect, test } from "bun:test";
import { isIPv4 as nodeIPv4, isIPv6 as nodeIPv6 } from "node:net";
import { isIPv4, isIPv6 } from "../../../src/host/toolkit/index.ts";

const cases: { name: string; s: string }[] = [
  { name: "empty", s: "" },
  { name: "only ::", s: "::" },
  { name: "three colons", s: ":::" },
  { name: "loopback", s: "::1" },
  { name: "trailing ::", s: "1::" },
  { name: "eight groups", s: "2001:db8:0:0:0:0:0:1" },
  { name: "nine groups", s: "1:2:3:4:5:6:7:8:9" },
  { name: ":: standing for no group", s: "1:2:3:4:5:6:7:8::" },
  { name: ":: for one group at the end", s: "1:2:3:4:5:6:7::" },
  { name: "two ::", s: "1::2::3" },
  { name: "five hex digits", s: "12345::" },
  { name: "not hex", s: "g::" },
  { name: "upper case", s: "2001:DB8::A" },
  { name: "dotted tail", s: "::ffff:198.18.0.1" },
  { name: "dotted tail after six groups", s: "1:2:3:4:5:6:198.18.0.1" },
  { name: "dotted tail after seven groups", s: "1:2:3:4:5:6:7:198.18.0.1" },
  { name: "short dotted tail", s: "::ffff:198.18.0" },
  { name: "dotted tail out of range", s: "::ffff:198.18.0.256" },
  { name: "dotted tail with a leading zero", s: "::ffff:198.18.0.01" },
  { name: "leading single colon", s: ":1:2:3:4:5:6:7" },
  { name: "trailing single colon", s: "1:2:3:4:5:6:7:" },
  { name: "space", s: " ::1" },
  { name: "IPv4", s: "198.18.0.1" },
  { name: "IPv4 zeros", s: "0.0.0.0" },
  { name: "IPv4 broadcast", s: "255.255.255.255" },
  { name: "IPv4 out of range", s: "256.1.1.1" },
  { name: "IPv4 leading zero", s: "198.018.0.1" },
  { name: "IPv4 trailing dot", s: "198.18.0.1." },
  { name: "IPv4 empty part", s: "198..0.1" },
  { name: "IPv4 three parts", s: "198.18.1" },
  { name: "IPv4 four-digit part", s: "1980.18.0.1" },
];

describe("address checks: node:net's answers", () => {
  for (const c of cases)
    test(`${c.name} (${JSON.stringify(c.s)})`, () => {
      expect([isIPv4(c.s), isIPv6(c.s)]).toEqual([nodeIPv4(c.s), nodeIPv6(c.s)]);
    });

  test("IPv6 zone ids are refused (nft cannot take them)", () => {
    expect(isIPv6("fe80::1%eth0")).toBe(false);
  });

  test("20,000 generated addresses, about half of them invalid", () => {
    // a fixed linear congruential generator: the same addresses every run
    let seed = 42;
    const rnd = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 16) % n;
    const wrong: string[] = [];
    let valid = 0;
    for (let k = 0; k < 20_000; k++) {
      const tail = rnd(5) === 0;
      const groups = Array.from({ length: tail ? 6 : 8 }, () => (rnd(3) === 0 ? "0" : rnd(65536).toString(16)));
      let s = groups.join(":");
      if (rnd(2)) {
        const a = rnd(groups.length);
        const b = a + rnd(groups.length - a + 1);
        s = `${groups.slice(0, a).join(":")}::${groups.slice(b).join(":")}`;
      }
      if (tail) s += `${s.endsWith(":") ? "" : ":"}${[rnd(300), rnd(256), rnd(256), rnd(256)].join(".")}`;
      if (rnd(3) === 0) {
        const i = rnd(s.length);
        s = s.slice(0, i) + ":.0f9x"[rnd(6)] + s.slice(i + rnd(2));
      }
      if (nodeIPv6(s)) valid++;
      if (isIPv6(s) !== nodeIPv6(s) || isIPv4(s) !== nodeIPv4(s)) wrong.push(s);
    }
    expect(wrong).toEqual([]);
    expect(valid).toBeGreaterThan(5_000);
    expect(valid).toBeLessThan(18_000);
  });
});
