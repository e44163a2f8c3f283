// src/host/toolkit/conntrack.ts: which UDP entries go stale between two syncs, and
// the conntrack(8) commands that delete them.

import { describe, expect, test } from "bun:test";
import { memoryLogger } from "../../../src/core/log.ts";
import {
  conntrackArgv,
  deleteStaleUdpFlows,
  frontendKey,
  matches,
  parseUdpEntries,
  staleUdpFlows,
  type StaleFlow,
  type UdpFrontend,
} from "../../../src/host/toolkit/conntrack.ts";
import { recorder } from "../../nft/fixtures.ts";

const fe = (ip: string | undefined, port: number, endpoints: string[], family: 4 | 6 = 4): UdpFrontend => ({ ip, family, port, endpoints });
const byKey = (...list: UdpFrontend[]) => new Map(list.map((f) => [frontendKey(f), f]));

describe("staleUdpFlows", () => {
  const cases: { name: string; prev: UdpFrontend[]; next: UdpFrontend[]; want: StaleFlow[] }[] = [
    {
      name: "removed endpoint: its DNATed entries",
      prev: [fe("198.18.0.1", 53, ["198.19.0.1:5353", "198.19.0.2:5353"])],
      next: [fe("198.18.0.1", 53, ["198.19.0.2:5353"])],
      want: [{ family: 4, dst: "198.18.0.1", dport: 53, endpoint: "198.19.0.1:5353" }],
    },
    {
      name: "frontend that had no endpoint gets one: every entry to it",
      prev: [fe("198.18.0.1", 53, [])],
      next: [fe("198.18.0.1", 53, ["198.19.0.1:5353"])],
      want: [{ family: 4, dst: "198.18.0.1", dport: 53, endpoint: undefined }],
    },
    {
      name: "new frontend with endpoints: entries made before it existed",
      prev: [],
      next: [fe("2001:db8:1::1", 53, ["[2001:db8:2::1]:5353"], 6)],
      want: [{ family: 6, dst: "2001:db8:1::1", dport: 53, endpoint: undefined }],
    },
    {
      name: "frontend removed: every entry to it",
      prev: [fe(undefined, 30053, ["198.19.0.1:5353"])],
      next: [],
      want: [{ family: 4, dst: undefined, dport: 30053, endpoint: undefined }],
    },
    {
      name: "unchanged endpoints: nothing",
      prev: [fe("198.18.0.1", 53, ["198.19.0.1:5353"])],
      next: [fe("198.18.0.1", 53, ["198.19.0.1:5353"])],
      want: [],
    },
    {
      name: "endpoint added to a frontend that had some: nothing",
      prev: [fe("198.18.0.1", 53, ["198.19.0.1:5353"])],
      next: [fe("198.18.0.1", 53, ["198.19.0.1:5353", "198.19.0.2:5353"])],
      want: [],
    },
    {
      name: "frontend without endpoints removed: nothing (nothing was DNATed)",
      prev: [fe("198.18.0.1", 53, [])],
      next: [],
      want: [],
    },
  ];
  for (const c of cases) test(c.name, () => expect(staleUdpFlows(byKey(...c.prev), byKey(...c.next))).toEqual(c.want));
});

describe("conntrackArgv", () => {
  const cases: { name: string; flow: StaleFlow; want: string }[] = [
    {
      name: "by service IP, port and endpoint",
      flow: { family: 4, dst: "198.18.0.1", dport: 53, endpoint: "198.19.0.1:5353" },
      want: "conntrack -D -f ipv4 -p udp --orig-dst 198.18.0.1 --orig-port-dst 53 --reply-src 198.19.0.1 --reply-port-src 5353",
    },
    {
      name: "IPv6 endpoint in brackets",
      flow: { family: 6, dst: "2001:db8:1::1", dport: 53, endpoint: "[2001:db8:2::1]:5353" },
      want: "conntrack -D -f ipv6 -p udp --orig-dst 2001:db8:1::1 --orig-port-dst 53 --reply-src 2001:db8:2::1 --reply-port-src 5353",
    },
    { name: "node port: any destination", flow: { family: 4, dport: 30053 }, want: "conntrack -D -f ipv4 -p udp --orig-port-dst 30053" },
  ];
  for (const c of cases) test(c.name, () => expect(conntrackArgv(c.flow).join(" ")).toBe(c.want));
});

describe("deleteStaleUdpFlows", () => {
  const listing = [
    "udp      17 29 src=198.18.128.1 dst=198.18.0.1 sport=40001 dport=53 src=198.19.0.1 dst=203.0.113.10 sport=5353 dport=40001 mark=0 use=1",
    "udp      17 28 src=198.18.128.1 dst=198.18.0.1 sport=40002 dport=53 src=198.19.0.2 dst=203.0.113.10 sport=5353 dport=40002 mark=0 use=1",
    "udp      17 27 src=198.18.128.1 dst=198.18.0.9 sport=40003 dport=53 [UNREPLIED] src=198.18.0.9 dst=198.18.128.1 sport=53 dport=40003 mark=0 use=1",
  ].join("\n");

  test("one flow: one filtered delete; '0 flow entries have been deleted' is not a failure", async () => {
    const { exec, calls } = recorder(() => "conntrack: exit 1: 0 flow entries have been deleted.");
    const log = memoryLogger();
    expect(await deleteStaleUdpFlows(exec, [{ family: 4, dport: 30053 }], log)).toBe(0);
    expect(calls.map((c) => c.argv.join(" "))).toEqual(["conntrack -D -f ipv4 -p udp --orig-port-dst 30053"]);
    expect(log.lines.filter((l) => l.includes("WARN"))).toEqual([]);
  });

  test("many flows: one listing per family, then only the entries that match", async () => {
    const calls: string[] = [];
    const exec = { run: async (argv: string[]) => (calls.push(argv.join(" ")), argv[1] === "-L" && argv[3] === "ipv4" ? listing : "") };
    const flows: StaleFlow[] = [
      { family: 4, dst: "198.18.0.1", dport: 53, endpoint: "198.19.0.1:5353" }, // first entry
      { family: 4, dst: "198.18.0.9", dport: 53 }, // third entry (made before the service existed)
      { family: 4, dst: "198.18.0.1", dport: 53, endpoint: "198.19.0.7:5353" }, // nothing
      { family: 6, dst: "2001:db8:1::1", dport: 53 },
    ];
    expect(await deleteStaleUdpFlows(exec, flows, memoryLogger())).toBe(0);
    // family after family (each timed on its own for kube-proxy's conntrack reconciler metrics)
    expect(calls).toEqual([
      "conntrack -L -f ipv4 -p udp",
      "conntrack -D -f ipv4 -p udp --orig-src 198.18.128.1 --orig-dst 198.18.0.1 --orig-port-src 40001 --orig-port-dst 53",
      "conntrack -D -f ipv4 -p udp --orig-src 198.18.128.1 --orig-dst 198.18.0.9 --orig-port-src 40003 --orig-port-dst 53",
      "conntrack -L -f ipv6 -p udp",
    ]);
  });

  test("IPv6 addresses match whatever their spelling in the state", () => {
    const [e] = parseUdpEntries(
      "udp      17 29 src=2001:db8:5::1 dst=2001:db8:1::a sport=40001 dport=53 src=2001:db8:2::1 dst=2001:db8:3::a sport=5353 dport=40001 mark=0 use=1",
      6,
    );
    expect(matches({ family: 6, dst: "2001:db8:1:0::A", dport: 53, endpoint: "[2001:db8:2:0::1]:5353" }, e)).toBe(true);
    expect(matches({ family: 6, dst: "2001:db8:1::a", dport: 53, endpoint: "[2001:db8:2::2]:5353" }, e)).toBe(false);
  });

  test("a failing delete is counted and logged, the others still run", async () => {
    const { exec, calls } = recorder((argv) => (argv.includes("30054") ? "conntrack: exit 1: Operation not permitted" : undefined));
    const log = memoryLogger();
    expect(await deleteStaleUdpFlows(exec, [{ family: 4, dport: 30054 }], log)).toBe(1);
    expect(calls).toHaveLength(1);
    expect(log.lines.filter((l) => l.includes("WARN"))).toHaveLength(1);
  });
});
