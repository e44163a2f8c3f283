// The kernel's nftables events read by kpng itself (plugins/nft/netlink.ts,
// netlink-socket.ts): the parser on datagrams captured from the kernel
// (netlink-captured.ts, made by netlink-capture.ts), on broken bytes, and
// the socket against the real kernel in a namespace. How the watch reads
// these lines: watch.test.ts; a whole repair: repair-real.test.ts.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { eventLines, parseNftEvents } from "../../plugins/nft/netlink.ts";
import { LOST_LINE, netlinkEvents } from "../../plugins/nft/netlink-socket.ts";
import { RulesWatch, type EventHandlers } from "../../plugins/nft/watch.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { CAPTURED } from "./netlink-captured.ts";

const lines = (datagrams: string[]) => datagrams.flatMap((b) => parseNftEvents(Buffer.from(b, "base64")).flatMap(eventLines));
const gen = /^# new generation \d+ by process \d+ \(nft\)$/;

describe("nftables events parsed from the kernel's datagrams", () => {
  const cases: Array<[string, string[]]> = [
    [
      "kpng's full sync, stamped",
      [
        "add table ip kpng",
        "add chain ip kpng",
        "add rule ip kpng",
        "add set ip kpng",
        "add set ip kpng",
        'add element ip kpng sync-stamp { "k-abcd-1" }',
        "GEN",
      ],
    ],
    [
      "kpng's proof: the stamp deleted and put back, a fresh one added and deleted",
      [
        "delete element ip kpng sync-stamp",
        'add element ip kpng sync-stamp { "k-abcd-1" }',
        'add element ip kpng sync-stamp { "k-abcd-2" }',
        "delete element ip kpng sync-stamp",
        "GEN",
      ],
    ],
    [
      "another process: an ip6 table, another family's table, a chain flushed",
      ["add table ip6 kpng", "add table inet other", "add chain inet other", "delete rule ip kpng", "GEN"],
    ],
    [
      "a firewall reload: flush ruleset",
      [
        "delete set ip kpng",
        "delete set ip kpng",
        "delete chain ip kpng",
        "delete table ip kpng",
        "delete table ip6 kpng",
        "delete chain inet other",
        "delete table inet other",
        "GEN",
      ],
    ],
  ];
  for (const [name, want] of cases)
    test(name, () => {
      const got = lines(CAPTURED[name]);
      expect(got.map((l) => (gen.test(l) ? "GEN" : l))).toEqual(want);
    });

  test("a truncated datagram yields the events before the cut, and no error", () => {
    const whole = Buffer.from(CAPTURED["kpng's full sync, stamped"][0], "base64");
    const all = parseNftEvents(whole);
    for (const cut of [0, 3, 17, 40, whole.byteLength - 1]) {
      const got = parseNftEvents(whole.subarray(0, cut));
      expect(got.length).toBeLessThanOrEqual(all.length);
      expect(all.slice(0, got.length)).toEqual(got);
    }
  });

  test("messages of other netfilter subsystems and netlink's own are skipped", () => {
    const msg = (type: number) => {
      const b = new DataView(new ArrayBuffer(20));
      b.setUint32(0, 20, true);
      b.setUint16(4, type, true);
      return new Uint8Array(b.buffer);
    };
    // NLMSG_DONE; a conntrack message (subsystem 1)
    expect(parseNftEvents(new Uint8Array([...msg(3), ...msg((1 << 8) | 0)]))).toEqual([]);
  });
});

describe("the event socket against the kernel (a namespace)", () => {
  const ns = `kpnl-${Math.random().toString(36).slice(2, 8)}`;
  const nft = (script: string) => {
    const r = Bun.spawnSync(["ip", "netns", "exec", ns, "nft", "-f", "-"], {
      stdin: new TextEncoder().encode(script),
      env: { ...process.env, HOME: "/dev/null" },
    });
    if (r.exitCode !== 0) throw new Error(r.stderr.toString());
  };
  beforeAll(() => void Bun.spawnSync(["ip", "netns", "add", ns]));
  afterAll(() => void Bun.spawnSync(["ip", "netns", "del", ns]));

  test("hears each commit in its namespace once polled, nothing from before it opened, nothing after it closed", () => {
    nft("add table ip before\n");
    const got: string[] = [];
    const on: EventHandlers = { line: (l) => got.push(l), exit: (why) => got.push(`exit: ${why}`) };
    const stream = netlinkEvents({ netns: ns }).open(on);
    nft('add table ip kpng\nadd set ip kpng sync-stamp { type ifname; }\nadd element ip kpng sync-stamp { "k-x-1" }\n');
    stream.poll!();
    expect(got.map((l) => (gen.test(l) ? "GEN" : l))).toEqual([
      "add table ip kpng",
      "add set ip kpng",
      'add element ip kpng sync-stamp { "k-x-1" }',
      "GEN",
    ]);
    stream.close();
    nft("delete table ip kpng\n");
    stream.poll!();
    expect(got).toHaveLength(4);
  });

  test("the watch reports lost events as it does the monitor's", () => {
    const reports: string[] = [];
    let on: EventHandlers | undefined;
    const watch = new RulesWatch({
      source: { name: "fake", listensAtOnce: true, open: (h) => ((on = h), { close() {} }) },
      log: memoryLogger(),
      onForeign: (w) => reports.push(w),
    });
    watch.start();
    on!.line(LOST_LINE);
    expect(reports).toEqual([LOST_LINE]);
  });
});
