// The pure parts of nft's `verify` (issue 36): one spelling per element
// whichever way it was read (nft's JSON, kpng's netlink dump, kpng's own
// text), and how differences are named by Service and frontend.

import { describe, expect, test } from "bun:test";
import { canonicalIPv6 } from "../../plugins/nft/addr.ts";
import { decodeValue } from "../../plugins/nft/netlink-dump.ts";
import { type Field, value, Writer } from "../../plugins/nft/netlink-values.ts";
import type { ProgrammedTable } from "../../plugins/nft/programmed.ts";
import { compareTable, elementFrontend, normalizeKey, parseTable } from "../../plugins/nft/verify.ts";

describe("one spelling per element", () => {
  test.each([
    ["2001:db8:2:0::1", "2001:db8:2::1"],
    ["2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["1:0:0:2:0:0:0:3", "1:0:0:2::3"],
    ["::", "::"],
    ["fe80::", "fe80::"],
    ["::ffff:1.2.3.4", "::ffff:102:304"],
  ])("IPv6 %s reads as %s (RFC 5952, as the kernel's bytes are printed)", (spelled, canon) => expect(canonicalIPv6(spelled)).toBe(canon));

  test.each([
    ["an IPv4 key as it is", "198.18.0.1 . tcp . 80", "198.18.0.1 . tcp . 80"],
    ["an IPv6 key compressed", "2001:db8:1:0::a . udp . 53", "2001:db8:1::a . udp . 53"],
    ["a host prefix as the address", "203.0.113.10/32", "203.0.113.10"],
    ["an IPv6 host prefix too", "2001:db8:3:0::a/128", "2001:db8:3::a"],
    ["a wider prefix kept", "2001:db8:3:0::/64", "2001:db8:3::/64"],
  ])("%s", (_n, text, want) => expect(normalizeKey(text)).toBe(want));

  test.each<[string, Field[], string]>([
    ["address . protocol . port (service-ips)", ["ipv6", "proto", "port"], "2001:db8:1::a . tcp . 80"],
    ["cluster IP . position (cluster-endpoints)", ["ipv4", "u32"], "198.18.0.1 . 16385"],
    ["a slot's position (endpoints shard)", ["u32"], "49152"],
    ["endpoint . port (a shard's value)", ["ipv4", "port"], "198.19.1.1 . 8080"],
    ["protocol . node port (service-nodeports)", ["proto", "port"], "sctp . 30080"],
  ])("the bytes kpng writes read back as its text: %s", (_n, fields, text) => {
    const w = new Writer();
    value(w, fields, text);
    expect(decodeValue(fields, w.buf.slice(0, w.at))).toBe(text);
  });
});

describe("differences named by Service and frontend", () => {
  test.each([
    ["service-ips", "198.18.0.1 . tcp . 80", "198.18.0.1:80/TCP"],
    ["no-endpoint-services", "2001:db8:1::a . udp . 53", "[2001:db8:1::a]:53/UDP"],
    ["service-nodeports", "tcp . 30080", "nodePort 30080/TCP"],
    ["cluster-target-ports-udp", "198.18.0.1 . 53", "198.18.0.1:53/UDP"],
    ["cluster-endpoints-tcp", "198.18.0.1 . 16384", "198.18.0.1"],
    ["endpoints-tcp-007", "114688", ""],
  ])("an element of %s (%s): %s", (set, key, frontend) => expect(elementFrontend(set, key)).toBe(frontend));

  // what nft 1.0.6 prints for kpng-like objects (a comment on an element, a verdict, a rule's comment)
  const listing = JSON.stringify({
    nftables: [
      { metainfo: { version: "1.0.6" } },
      { table: { family: "ip", name: "kpng", handle: 1 } },
      {
        map: {
          family: "ip",
          name: "service-ips",
          table: "kpng",
          type: ["ipv4_addr", "inet_proto", "inet_service"],
          map: "verdict",
          elem: [
            [{ elem: { val: { concat: ["198.18.0.1", "tcp", 80] }, comment: "default/web/tcp/http" } }, { goto: { target: "svc-A" } }],
            [{ elem: { val: { concat: ["198.18.0.9", "tcp", 80] }, comment: "default/gone/tcp/http" } }, { drop: null }],
          ],
        },
      },
      { chain: { family: "ip", table: "kpng", name: "services", handle: 2 } },
      { rule: { family: "ip", table: "kpng", chain: "services", handle: 3, expr: [] } },
      { rule: { family: "ip", table: "kpng", chain: "services", handle: 4, comment: "someone's", expr: [{ drop: null }] } },
    ],
  });
  const want: ProgrammedTable = {
    family: "ip",
    chains: new Map([
      ["services", { owner: "", rules: [{ rule: "ip daddr . meta l4proto . th dport vmap @service-ips" }] }],
      ["svc-A", { owner: "default/web", rules: [] }],
    ]),
    sets: new Map([
      [
        "service-ips",
        {
          kind: "map" as const,
          owner: "",
          spec: { name: "service-ips", type: "ipv4_addr . inet_proto . inet_service : verdict" },
          elements: new Map([
            [
              "198.18.0.1 . tcp . 80",
              { key: "198.18.0.1 . tcp . 80", value: "goto svc-B", comment: "default/web/tcp/http", owner: "default/web" },
            ],
            [
              "198.18.0.2 . tcp . 80",
              { key: "198.18.0.2 . tcp . 80", value: "goto svc-C", comment: "default/db/tcp/pg", owner: "default/db" },
            ],
          ]),
        },
      ],
    ]),
  };

  test("nft's listing against what kpng programmed: each difference with its Service, frontend and kind", () => {
    const drifts = compareTable(want, parseTable("ip", listing));
    const brief = drifts.map((d) => `${d.kind} ${d.service} ${d.frontend}`).sort();
    expect(brief).toEqual([
      "differs default/web 198.18.0.1:80/TCP", // goto svc-A where kpng wrote goto svc-B
      "extra  ", // the rule someone added (its comment names no Service)
      "extra default/gone 198.18.0.9:80/TCP", // an element kpng did not write: its comment names the Service
      "missing default/db 198.18.0.2:80/TCP",
      "missing default/web ", // its chain
    ]);
    expect(drifts.find((d) => d.kind === "differs")!.detail).toContain("kernel holds 198.18.0.1 . tcp . 80 : goto svc-A");
  });
});
