// The start-up bench's floors (bench/floors.ts) measure what they say: the
// ruleset of a node namespace loaded by hand into an empty one, by `nft -f`
// and by its netlink batches replayed as nft sent them; in iptables mode the
// restores of the saves and one DNAT chain rewritten. Real nft, iptables and
// ipset in namespaces made here; the figures themselves are never asserted.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { dnatRewrite, iptablesFloors, nftFloors, sentBatches } from "../../bench/floors.ts";

const ns = `kflt${Math.random().toString(36).slice(2, 8)}`;
const sh = (argv: string[], stdin?: string) => {
  const p = Bun.spawnSync(argv, { stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin), stderr: "pipe" });
  if (p.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${p.stderr.toString()}`);
  return p.stdout.toString();
};
const inNs = (argv: string[], stdin?: string) => sh(["ip", "netns", "exec", ns, ...argv], stdin);
const noListeners = async () => 0;

const RULESET = `table ip6 kpng {
  map service-ips {
    type ipv6_addr . inet_proto . inet_service : verdict
    elements = { 2001:db8:1::1 . tcp . 80 : goto svc-a }
  }
  set no-endpoints {
    type ipv6_addr . inet_proto . inet_service
    elements = { 2001:db8:1::2 . tcp . 80 }
  }
  chain svc-a {
    numgen random mod 2 vmap { 0 : goto ep-1, 1 : goto ep-2 }
  }
  chain ep-1 {
    meta l4proto tcp dnat to [2001:db8:2::1]:8080
  }
  chain ep-2 {
    meta l4proto tcp dnat to [2001:db8:2::2]:8080
  }
  chain services {
    ip6 daddr . meta l4proto . th dport vmap @service-ips
  }
  chain nat-prerouting {
    type nat hook prerouting priority dstnat;
    jump services
  }
}
`;

const IP6TABLES = `*nat
:PREROUTING ACCEPT [0:0]
:KPNG-SVC-A - [0:0]
:KPNG-SVC-B - [0:0]
-A PREROUTING -d 2001:db8:1::1/128 -p tcp --dport 80 -j KPNG-SVC-A
-A KPNG-SVC-A -m statistic --mode random --probability 0.5 -p tcp -j DNAT --to-destination [2001:db8:2::1]:8080
-A KPNG-SVC-A -p tcp -j DNAT --to-destination [2001:db8:2::2]:8080
-A KPNG-SVC-B -p tcp -j DNAT --to-destination [2001:db8:2::3]:8080
COMMIT
`;

beforeAll(() => sh(["ip", "netns", "add", ns]));
afterAll(() => sh(["ip", "netns", "del", ns]));

describe("bench floors", () => {
  test("nft: the by-hand load and the replay of nft's own batch load the node's ruleset, read back the same", async () => {
    inNs(["nft", "-f", "-"], RULESET);
    const lines = await nftFloors(ns, noListeners);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^ {2}floor, by hand: nft -f of kpng's ruleset .*: \d+ ms \(nft CPU user \d+ ms \+ sys \d+ ms\)$/);
    // one batch (nft sends a ruleset in one), replayed into an empty namespace and listed back equal
    expect(lines[1]).toMatch(/^ {2}floor, the kernel's own: the same ruleset's 1 netlink batch .*: \d+ ms$/);
    expect(lines[1]).not.toContain("differs");
    inNs(["nft", "flush", "ruleset"]);
  });

  test("strace's dump: only sendmsg batches (nft's cache questions by sendto are left out), bytes in order", () => {
    const dump = [
      "sendto(3, ..., 20, 0, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 20",
      " | 00000  14 00 00 00 10 0a 01 00  00 00 00 00 00 00 00 00  ................ |",
      " | 00010  00 00 00 00                                       ....             |",
      "sendmsg(3, {msg_name={sa_family=AF_NETLINK}, msg_iov=[...], msg_iovlen=1}, 0) = 20",
      " * 20 bytes in buffer 0",
      " | 00000  14 00 00 00 10 00 01 00  00 00 00 00 00 00 00 00  ................ |",
      " | 00010  00 00 00 0a                                       ....             |",
      "+++ exited with 0 +++",
    ].join("\n");
    const batches = sentBatches(dump);
    expect(batches).toHaveLength(1);
    expect([...batches[0]]).toEqual([0x14, 0, 0, 0, 0x10, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a]);
  });

  test("iptables: the chain with the most DNAT rules, declared again with its own rules for --noflush", () => {
    const r = dnatRewrite(IP6TABLES);
    expect(r?.chain).toBe("KPNG-SVC-A");
    expect(r?.rules).toBe(2);
    expect(r?.input.split("\n")).toEqual([
      "*nat",
      ":KPNG-SVC-A - [0:0]",
      "-A KPNG-SVC-A -m statistic --mode random --probability 0.5 -p tcp -j DNAT --to-destination [2001:db8:2::1]:8080",
      "-A KPNG-SVC-A -p tcp -j DNAT --to-destination [2001:db8:2::2]:8080",
      "COMMIT",
      "",
    ]);
  });

  test("iptables: the restores of the saves and the one-chain rewrite run by hand in an empty namespace", async () => {
    inNs(["ipset", "create", "KPNG-HAIRPIN-6", "hash:ip,port,ip", "family", "inet6"]);
    inNs(["ip6tables-restore"], IP6TABLES);
    const lines = await iptablesFloors(ns, noListeners);
    expect(lines[0]).toMatch(
      /^ {2}floor, by hand into an empty namespace: ipset restore \d+ ms \+ iptables-restore \d+ ms .*ip6tables-restore \d+ ms \(4 rules\) = \d+ ms$/,
    );
    expect(lines[1]).toMatch(
      /^ {2}floor, one DNAT chain \(KPNG-SVC-A, 2 rules\) rewritten by hand with ip6tables-restore --noflush: median \d+ ms of 7/,
    );
  });
});
