// The element encoder (plugins/nft/netlink-batch.ts) against the bytes
// `nft -f` sent the kernel for the same statements: captured with strace in
// a namespace by test/nft/netlink-batch-capture.ts (netlink-batch-captured.json
// says with which nft and kernel). nft numbers its messages its own way and
// names each set also by its id in nft's batch (NFTA_SET_ELEM_LIST_SET_ID);
// the encoder's batch comes after the sets exist and names them only: the
// comparison zeroes the sequence numbers and drops that attribute.

import { describe, expect, test } from "bun:test";
import { NftRunner } from "../../plugins/nft/executor.ts";
import {
  batchable,
  elementOffsets,
  encodeBatch,
  encodeElements,
  FIRST_ROUND,
  fillRounds,
  type NftObject,
  objectQuery,
  objectsFound,
  parseReplies,
  refusedElement,
  setLayout,
  tableQuery,
  tablesFound,
} from "../../plugins/nft/netlink-batch.ts";
import { ListElement } from "../../plugins/nft/render-service.ts";
import { NftSync } from "../../plugins/nft/plan.ts";
import { Transaction, type Op } from "../../plugins/nft/transaction.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { isIPv6, KpngError } from "../../src/host/toolkit/index.ts";
import { Unencodable, value, Writer } from "../../plugins/nft/netlink-values.ts";
import { isTransaction, nodeConfig, recorder } from "./fixtures.ts";
import { batchCaptureState } from "./netlink-batch-cases.ts";
import type { Captured } from "./netlink-batch-capture.ts";
import captured from "./netlink-batch-captured.json";

const CAPTURED = (captured as Captured).cases;
const NFTA_SET_ELEM_LIST_SET_ID = 4;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NEWSETELEM = (10 << 8) | 12;

/**
 * A NEWSETELEM message as hex, without what the kernel does not read: its
 * sequence number, the set id, the bytes that pad attributes (nft leaves old
 * buffer contents there) and the numbers libnftnl gives each element's
 * attribute (1, 2, ... in a message; nft 1.0.6 goes on counting into the
 * next message of a statement).
 */
function comparable(msg: Uint8Array): string {
  const b = Buffer.from(msg);
  const parts: Buffer[] = [Buffer.from(b.subarray(0, 20))];
  parts[0].writeUInt32LE(0, 8);
  const attr = (at: number, type?: number) => {
    const len = b.readUInt16LE(at);
    const a = Buffer.alloc((len + 3) & ~3);
    b.copy(a, 0, at, at + len);
    if (type !== undefined) a.writeUInt16LE(type, 2);
    return a;
  };
  for (let at = 20; at < b.length; at += (b.readUInt16LE(at) + 3) & ~3) {
    const type = b.readUInt16LE(at + 2) & 0x3fff;
    if (type === NFTA_SET_ELEM_LIST_SET_ID) continue;
    if (type !== NFTA_SET_ELEM_LIST_ELEMENTS) {
      parts.push(attr(at));
      continue;
    }
    parts.push(attr(at).subarray(0, 4));
    const end = at + b.readUInt16LE(at);
    for (let e = at + 4; e < end; e += (b.readUInt16LE(e) + 3) & ~3) parts.push(attr(e, 0x8001));
  }
  const out = Buffer.concat(parts);
  out.writeUInt32LE(out.length, 0);
  return out.toString("hex");
}

/** the batch's messages: type and bytes */
function messages(batch: Uint8Array): { type: number; bytes: Uint8Array }[] {
  const v = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const out: { type: number; bytes: Uint8Array }[] = [];
  for (let at = 0; at < batch.byteLength; ) {
    const len = v.getUint32(at, true);
    out.push({ type: v.getUint16(at + 4, true), bytes: batch.subarray(at, at + len) });
    at += (len + 3) & ~3;
  }
  return out;
}

const tx = (ops: Op[]) => ops.reduce((t, op) => t.add(op), new Transaction());
const EMPTY = { chains: new Map(), sets: new Map() };

describe("netlink element batch: the bytes nft sends", () => {
  test("the capture covers every kind of set kpng fills, and one statement split over messages", () => {
    const layouts = new Set(CAPTURED.map((c) => c.set.set.type));
    expect(layouts.size).toBeGreaterThanOrEqual(10);
    expect(CAPTURED.some((c) => c.messages.length > 1)).toBe(true);
  });

  test.each(CAPTURED.map((c) => [c.name, c] as const))("%s", (_, c) => {
    const { batch, rest } = encodeElements(tx([c.set, c.op]));
    if (!setLayout(c.set.set)) {
      // intervals stay with nft
      expect(batch).toBeUndefined();
      expect(rest).toEqual([c.set, c.op]);
      return;
    }
    expect(rest).toEqual([c.set]);
    const sent = messages(batch!.bytes);
    expect(sent[0].type).toBe(0x10); // NFNL_MSG_BATCH_BEGIN
    expect(sent.at(-1)!.type).toBe(0x11); // NFNL_MSG_BATCH_END
    expect(sent.slice(1, -1).every((m) => m.type === NEWSETELEM)).toBe(true);
    expect(sent.slice(1, -1).map((m) => comparable(m.bytes))).toEqual(c.messages.map((m) => comparable(Buffer.from(m, "base64"))));
  });
});

describe("netlink element batch: a dispatch list's positions", () => {
  test("encoded from their parts, the same bytes as from their key text (the text nft was captured with)", () => {
    const plan = new NftSync(nodeConfig()).plan(batchCaptureState(), null, { ip: EMPTY, ip6: EMPTY });
    const { elements } = batchable(plan.tx);
    const positions = elements.flatMap((e) => e.op.items).filter((e) => e instanceof ListElement);
    // every kind of list: under a cluster IP of each family, and in a slot of a shard map
    expect(new Set(positions.map((e) => (e.ip === undefined ? "slot" : e.ip.includes(":") ? "v6" : "v4")))).toEqual(
      new Set(["slot", "v4", "v6"]),
    );
    const asText = elements.map(({ op, layout }) => ({
      op: { ...op, items: op.items.map(({ key, value, comment }) => ({ key, value, comment })) },
      layout,
    }));
    expect(Buffer.from(encodeBatch(elements).batch!.bytes).toString("hex")).toBe(
      Buffer.from(encodeBatch(asText).batch!.bytes).toString("hex"),
    );
  });

  const layout = setLayout({ name: "m", type: "ip6 daddr . numgen random mod 2 : ip6 daddr", typeOf: true })!;
  const cases: { name: string; e: ListElement }[] = [
    { name: "a position with no cluster IP in a map keyed by one", e: new ListElement(undefined, 1, "2001:db8::1") },
    { name: "a cluster IP of the other family", e: new ListElement("198.18.0.1", 1, "2001:db8::1") },
    { name: "a position beyond 32 bits", e: new ListElement("2001:db8::10", 2 ** 32, "2001:db8::1") },
  ];
  test.each(cases.map((c) => [c.name, c] as const))("%s: left to nft, as its text would be", (_, c) => {
    const op: Op = { kind: "elements", verb: "add", family: "ip6", set: "m", items: [c.e] };
    expect(encodeBatch([{ op: op as Extract<Op, { kind: "elements" }>, layout }]).unencoded).toEqual([op]);
  });
});

describe("netlink element batch: what stays with nft", () => {
  const set = (type: string, extra = {}): Op => ({ kind: "set", verb: "add", family: "ip", set: { name: "s", type, ...extra } });
  const els = (...items: { key: string; value?: string }[]): Op => ({ kind: "elements", verb: "add", family: "ip", set: "s", items });
  const cases: { name: string; ops: Op[]; encoded: boolean }[] = [
    { name: "an interval set", ops: [set("ipv4_addr", { flags: ["interval"] }), els({ key: "198.18.0.0/24" })], encoded: false },
    { name: "a type the encoder does not know", ops: [set("ether_addr"), els({ key: "02:00:00:00:00:01" })], encoded: false },
    { name: "a set not declared in the transaction", ops: [els({ key: "198.18.0.1" })], encoded: false },
    { name: "a key that is no address", ops: [set("ipv4_addr"), els({ key: "198.18.0.256" })], encoded: false },
    { name: "an address with a leading zero", ops: [set("ipv4_addr"), els({ key: "198.018.0.1" })], encoded: false },
    { name: "a CIDR in a plain set", ops: [set("ipv4_addr"), els({ key: "198.18.0.0/24" })], encoded: false },
    { name: "a map element without its value", ops: [set("ipv4_addr : verdict"), els({ key: "198.18.0.1" })], encoded: false },
    { name: "an unknown verdict", ops: [set("ipv4_addr : verdict"), els({ key: "198.18.0.1", value: "queue" })], encoded: false },
    { name: "a good element", ops: [set("ipv4_addr : verdict"), els({ key: "198.18.0.1", value: "goto c" })], encoded: true },
  ];
  test.each(cases.map((c) => [c.name, c] as const))("%s", (_, c) => {
    const { batch, rest } = encodeElements(tx(c.ops));
    expect(batch !== undefined).toBe(c.encoded);
    expect(rest.length).toBe(c.encoded ? c.ops.length - 1 : c.ops.length);
  });

  test("IPv6 text in every spelling the kernel reads the same", () => {
    const spellings = ["2001:db8::1", "2001:0db8:0:0:0:0:0:1", "2001:DB8::0:1", "::ffff:198.18.0.1", "::", "::1", "1::"];
    const want = ["20010db8000000000000000000000001", "20010db8000000000000000000000001", "20010db8000000000000000000000001"];
    want.push("00000000000000000000ffffc6120001", "0".repeat(32), `${"0".repeat(31)}1`, `0001${"0".repeat(28)}`);
    const got = spellings.map((key) => {
      const { batch } = encodeElements(
        tx([
          { kind: "set", verb: "add", family: "ip6", set: { name: "s", type: "ipv6_addr" } },
          { kind: "elements", verb: "add", family: "ip6", set: "s", items: [{ key }] },
        ]),
      );
      // the key's NFTA_DATA_VALUE: the last 16 bytes before the batch end
      const b = Buffer.from(batch!.bytes);
      return b.subarray(b.length - 20 - 16, b.length - 20).toString("hex");
    });
    expect(got).toEqual(want);
  });
});

describe("netlink element batch: IPv6 text", () => {
  /** the 16 bytes of an address the check takes: "::" expanded, each group big-endian, an IPv4 tail as its 4 bytes */
  function expanded(text: string): string {
    const groups = (part: string) =>
      part === ""
        ? []
        : part.split(":").flatMap((g) => {
            if (!g.includes(".")) return [g.padStart(4, "0").toLowerCase()];
            const [a, b, c, d] = g.split(".").map(Number);
            return [((a << 8) | b).toString(16).padStart(4, "0"), ((c << 8) | d).toString(16).padStart(4, "0")];
          });
    const [head, tail] = text.split("::");
    const h = groups(head);
    const t = tail === undefined ? [] : groups(tail);
    return [...h, ...Array(8 - h.length - t.length).fill("0000"), ...t].join("");
  }
  /** the encoder's bytes of a value of type ipv6, or undefined when it refuses the text */
  function encoded(text: string): string | undefined {
    const w = new Writer();
    try {
      value(w, ["ipv6"], text);
    } catch (err) {
      if (err instanceof Unencodable) return undefined;
      throw err;
    }
    return Buffer.from(w.buf.subarray(0, w.at)).toString("hex");
  }
  /** texts near the edges: every compression place and group count, IPv4 tails, digits and characters out of place */
  function corpus(): string[] {
    let seed = 25;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    const pick = <T>(xs: readonly T[]) => xs[rand(xs.length)];
    const hex = [..."0123456789abcdefABCDEF"];
    const group = () =>
      Array.from({ length: rand(12) ? 1 + rand(4) : 5 }, () => (rand(60) ? pick(hex) : pick(["g", ".", " ", "é"]))).join("");
    const quad = () => Array.from({ length: 4 }, () => pick(["0", "1", "9", "10", "99", "255", "256", "01", "1000"])).join(".");
    const out = ["::", "::1", "1::", ":::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "::ffff:198.18.0.1", "1.2.3.4", "fe80::1%eth0", ""];
    for (let k = 0; k < 3000; k++) {
      const compressed = rand(3) > 0;
      const n = compressed ? rand(8) : pick([8, 8, 8, 7, 9]);
      const gs = Array.from({ length: n }, group);
      if (n && rand(4) === 0) gs[n - 1] = quad();
      const at = compressed ? rand(n + 1) : -1;
      let text = at < 0 ? gs.join(":") : `${gs.slice(0, at).join(":")}::${gs.slice(at).join(":")}`;
      if (rand(20) === 0) text = text.replace(":", rand(2) ? ":::" : "");
      if (rand(30) === 0) text = rand(2) ? `:${text}` : `${text}:`;
      out.push(text);
    }
    return out;
  }

  test("the encoder takes exactly what the renderer's check takes, with the bytes of a plain expansion", () => {
    const texts = corpus();
    const taken = texts.filter(isIPv6);
    // the corpus reaches both sides of the check, and IPv4 tails and compressions among those taken
    expect(taken.length).toBeGreaterThan(500);
    expect(texts.length - taken.length).toBeGreaterThan(500);
    expect(taken.some((t) => t.includes(".") && t.includes("::"))).toBe(true);
    const got = texts.map((t) => encoded(t));
    expect(got).toEqual(texts.map((t) => (isIPv6(t) ? expanded(t) : undefined)));
  });
});

describe("netlink element batch: the kernel's answers", () => {
  test("an error names the element at the offset the kernel gave", () => {
    const items = Array.from({ length: 6000 }, (_, i) => ({ key: `198.18.${i >> 8}.${i & 255}` }));
    const { batch } = encodeElements(
      tx([
        { kind: "set", verb: "add", family: "ip", set: { name: "s", type: "ipv4_addr" } },
        { kind: "elements", verb: "add", family: "ip", set: "s", items },
      ]),
    );
    const msg = batch!.messages[1];
    // read back from the bytes: one offset per element of the message, each at the attribute numbered by its place
    const offsets = elementOffsets(batch!, msg);
    const bytes = Buffer.from(batch!.bytes.subarray(msg.at));
    expect(offsets).toHaveLength((batch!.messages[2]?.first ?? items.length) - msg.first);
    expect(offsets.map((o) => bytes.readUInt16LE(o + 2) & 0x7fff)).toEqual(offsets.map((_, i) => i + 1));
    // an NLMSG_ERROR (capped, with TLVs) for the second message, pointing at its 11th element
    const err = Buffer.alloc(16 + 4 + 16 + 8);
    err.writeUInt32LE(err.length, 0);
    err.writeUInt16LE(2, 4); // NLMSG_ERROR
    err.writeUInt16LE(0x300, 6); // NLM_F_CAPPED | NLM_F_ACK_TLVS
    err.writeInt32LE(-17, 16); // -EEXIST
    err.writeUInt32LE(200, 20);
    err.writeUInt32LE(msg.seq, 28);
    err.writeUInt16LE(8, 36);
    err.writeUInt16LE(2, 38); // NLMSGERR_ATTR_OFFS
    err.writeUInt32LE(offsets[10] + 4, 40);
    const [reply] = parseReplies(new Uint8Array(err));
    expect(reply).toEqual({ seq: msg.seq, error: -17, offset: offsets[10] + 4 });
    expect(refusedElement(batch!, reply)).toBe(`add element ip kpng s { ${items[msg.first + 10].key} }`);
    expect(refusedElement(batch!, { seq: msg.seq, error: -2 })).toBe("add element ip kpng s");
  });
});

describe("netlink element batch: rounds", () => {
  const items = (n: number, third = 0) => Array.from({ length: n }, (_, i) => ({ key: `198.${18 + third}.${i >> 8}.${i & 255}` }));
  const elementsOf = (ops: Op[]) => batchable(tx([{ kind: "table", verb: "add", family: "ip" }, ...ops])).elements;
  const set = (name: string): Op => ({ kind: "set", verb: "add", family: "ip", set: { name, type: "ipv4_addr" } });
  const add = (name: string, n: number, third = 0): Op => ({
    kind: "elements",
    verb: "add",
    family: "ip",
    set: name,
    items: items(n, third),
  });

  test("no round adds to a set more than it holds after the rounds before (FIRST_ROUND at first); order kept", () => {
    // big: 256, then 256 (holds 256), then 512 (holds 512), then the last 76; small fits the first round
    const ops = [set("big"), set("small"), add("big", 1100), add("small", 10, 1)];
    const rounds = fillRounds(elementsOf(ops));
    const sizes = rounds.map((r) => r.map((e) => `${e.op.set} ${e.op.items.length}`));
    expect(sizes).toEqual([[`big ${FIRST_ROUND}`, "small 10"], ["big 256"], ["big 512"], ["big 76"]]);
    const big = rounds.flatMap((r) => r.filter((e) => e.op.set === "big").flatMap((e) => e.op.items));
    expect(big).toEqual(items(1100));
  });

  test("a set's second op goes on from where its first left, in the same rounds", () => {
    const rounds = fillRounds(elementsOf([set("s"), add("s", 200), add("s", 400, 1)]));
    expect(rounds.map((r) => r.map((e) => e.op.items.length))).toEqual([[200, 56], [256], [88]]);
  });

  test("a first load of few elements is one round, its ops as they were", () => {
    const elements = elementsOf([set("s"), add("s", 3)]);
    const rounds = fillRounds(elements);
    expect(rounds).toHaveLength(1);
    expect(rounds[0][0].op).toBe(elements[0].op);
  });
});

describe("NftRunner: a first load's elements", () => {
  const load = () =>
    tx([
      { kind: "table", verb: "add", family: "ip" },
      { kind: "map", verb: "add", family: "ip", set: { name: "m", type: "ipv4_addr : verdict" } },
      { kind: "elements", verb: "add", family: "ip", set: "m", items: [{ key: "198.18.0.1", value: "drop" }] },
    ]);
  const scripts = (calls: { argv: string[]; stdin?: string }[]) => calls.filter(isTransaction).map((c) => c.stdin ?? "");
  const bigLoad = (n: number) =>
    tx([
      { kind: "table", verb: "add", family: "ip" },
      { kind: "map", verb: "add", family: "ip", set: { name: "m", type: "ipv4_addr : verdict" } },
      {
        kind: "elements",
        verb: "add",
        family: "ip",
        set: "m",
        items: Array.from({ length: n }, (_, i) => ({ key: `198.18.${i >> 8}.${i & 255}`, value: "drop" })),
      },
    ]);

  test("go on the socket, the rest through nft -f first", async () => {
    const { exec, calls } = recorder();
    const sent: Uint8Array[] = [];
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, () => ({ send: (b) => (sent.push(b), []), close() {} }));
    await runner.apply(load(), { full: true, fresh: true });
    expect(scripts(calls)).toEqual(["add table ip kpng\nadd map ip kpng m { type ipv4_addr : verdict; }\n"]);
    expect(sent.length).toBe(1);
  });

  test("only on a first load: a full sync over tables in place goes through nft -f whole", async () => {
    const { exec, calls } = recorder();
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, () => {
      throw new Error("not opened for this");
    });
    await runner.apply(load(), { full: true });
    expect(scripts(calls)).toEqual([load().print()]);
  });

  test("a socket that cannot be opened: nft -f, said once", async () => {
    const { exec, calls } = recorder();
    const log = memoryLogger();
    const runner = new NftRunner(exec, undefined, log, undefined, () => {
      throw new KpngError("unavailable", "netlink: socket(AF_NETLINK, NETLINK_NETFILTER) failed (errno 1)");
    });
    await runner.apply(load(), { full: true, fresh: true });
    await runner.apply(load(), { full: true, fresh: true });
    expect(scripts(calls)).toEqual([load().print(), load().print()]);
    expect(log.lines.filter((l) => l.includes("netlink")).length).toBe(1);
  });

  test("a load of many elements: one batch per round, sent in turn", async () => {
    const { exec } = recorder();
    const sent: Uint8Array[] = [];
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, () => ({ send: (b) => (sent.push(b), []), close() {} }));
    await runner.apply(bigLoad(1100), { full: true, fresh: true });
    // 256 + 256 + 512 + 76 elements
    expect(sent.length).toBe(4);
  });

  test("a round that cannot be sent after others went: its elements and the later rounds' through nft -f", async () => {
    const { exec, calls } = recorder();
    const log = memoryLogger();
    let sends = 0;
    const runner = new NftRunner(exec, undefined, log, undefined, () => ({
      send: () => {
        if (++sends === 2) throw new KpngError("unavailable", "netlink send of 9999 bytes failed: No buffer space available");
        return [];
      },
      close() {},
    }));
    await runner.apply(bigLoad(1100), { full: true, fresh: true });
    const [skeleton, ...rest] = scripts(calls);
    expect(skeleton).not.toContain("add element");
    // the first round (256 elements) went on the socket; the other 844, through nft
    const keys = rest.join("").match(/198\.18\.\d+\.\d+/g) ?? [];
    expect(keys.length).toBe(1100 - 256);
    expect(keys[0]).toBe("198.18.1.0");
    expect(sends).toBe(2);
    expect(log.lines.filter((l) => l.includes("No buffer space")).length).toBe(1);
  });

  test("a batch that cannot be sent: its elements through nft -f after the skeleton", async () => {
    const { exec, calls } = recorder();
    const log = memoryLogger();
    const runner = new NftRunner(exec, undefined, log, undefined, () => ({
      send: () => {
        throw new KpngError("unavailable", "netlink send of 96 bytes failed: Message too long");
      },
      close() {},
    }));
    await runner.apply(load(), { full: true, fresh: true });
    expect(scripts(calls)).toEqual([
      "add table ip kpng\nadd map ip kpng m { type ipv4_addr : verdict; }\n",
      "add element ip kpng m { 198.18.0.1 : drop }\n",
    ]);
    expect(log.lines.filter((l) => l.includes("Message too long")).length).toBe(1);
  });
});

/** a kernel's answer: NLMSG_ERROR `errno` for the message `seq`, capped */
function errorAnswer(seq: number, errno: number): Uint8Array {
  const b = Buffer.alloc(16 + 4 + 16);
  b.writeUInt32LE(b.length, 0);
  b.writeUInt16LE(2, 4); // NLMSG_ERROR
  b.writeUInt16LE(0x100, 6); // NLM_F_CAPPED
  b.writeInt32LE(-errno, 16);
  b.writeUInt32LE(seq, 28);
  return new Uint8Array(b);
}

/** a kernel's answer: NFT_MSG_NEWTABLE for `family` (NFPROTO_*), kpng's table */
function tableAnswer(seq: number, family: number): Uint8Array {
  const b = Buffer.alloc(16 + 4 + 12);
  b.writeUInt32LE(b.length, 0);
  b.writeUInt16LE((10 << 8) | 0, 4);
  b.writeUInt32LE(seq, 8);
  b.writeUInt8(family, 16);
  b.writeUInt16LE(9, 20); // NFTA_TABLE_NAME, "kpng\0"
  b.writeUInt16LE(1, 22);
  b.write("kpng\0", 24);
  return new Uint8Array(b);
}

describe("netlink: do kpng's tables exist", () => {
  test("one NFT_MSG_GETTABLE per family, numbered from 1, naming kpng's table, asking nothing to be created", () => {
    const msgs = messages(tableQuery(["ip", "ip6"]));
    expect(msgs.map((m) => Buffer.from(m.bytes).toString("hex"))).toEqual([
      // len 32, type NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE, NLM_F_REQUEST, seq, pid 0; nfgenmsg family; NFTA_TABLE_NAME "kpng"
      "20000000" + "010a" + "0100" + "01000000" + "00000000" + "02000000" + "0900" + "0100" + "6b706e6700000000",
      "20000000" + "010a" + "0100" + "02000000" + "00000000" + "0a000000" + "0900" + "0100" + "6b706e6700000000",
    ]);
  });

  const cases: { name: string; answers: Uint8Array[]; found: string[] }[] = [
    { name: "neither", answers: [errorAnswer(1, 2), errorAnswer(2, 2)], found: [] },
    { name: "the IPv6 table only", answers: [errorAnswer(1, 2), tableAnswer(2, 10)], found: ["ip6"] },
    { name: "both, in one datagram", answers: [new Uint8Array([...tableAnswer(1, 2), ...tableAnswer(2, 10)])], found: ["ip", "ip6"] },
  ];
  for (const c of cases)
    test(`the kernel's answers: ${c.name}`, () => {
      expect([...tablesFound(["ip", "ip6"], c.answers)].sort() as string[]).toEqual(c.found);
    });

  test("an answer other than the table or 'no such table' is no answer", () => {
    expect(() => tablesFound(["ip", "ip6"], [errorAnswer(1, 2), errorAnswer(2, 1)])).toThrow("asking for table ip6 kpng: errno 1");
  });
});

describe("NftRunner: a first load's base, sent ahead of its services", () => {
  const base = () => ({
    tx: tx([
      { kind: "table", verb: "create", family: "ip" },
      { kind: "map", verb: "add", family: "ip", set: { name: "m", type: "ipv4_addr : verdict" } },
    ]),
  });
  /** the full sync's transaction: the base's ops (the same objects), a chain, elements of the base's map */
  function load() {
    const table: Op = { kind: "table", verb: "add", family: "ip" };
    const map: Op = { kind: "map", verb: "add", family: "ip", set: { name: "m", type: "ipv4_addr : verdict" } };
    const all = tx([
      table,
      map,
      { kind: "chain", verb: "add", family: "ip", chain: { name: "c" } },
      { kind: "elements", verb: "add", family: "ip", set: "m", items: [{ key: "198.18.0.1", value: "goto c" }] },
    ]);
    return { all, ahead: { ...base(), covers: new Set([table, map]) } };
  }
  const scripts = (calls: { argv: string[]; stdin?: string }[]) => calls.filter(isTransaction).map((c) => c.stdin ?? "");
  /** a socket whose kernel has kpng's tables of `families` */
  const kernel =
    (families: number[], sent: Uint8Array[] = []) =>
    () => ({
      send: (b: Uint8Array) => {
        sent.push(b);
        if (b.length && new DataView(b.buffer, b.byteOffset).getUint16(4, true) !== ((10 << 8) | 1)) return [];
        return [1, 2].map((seq, i) => (families.includes([2, 10][i]) ? tableAnswer(seq, [2, 10][i]) : errorAnswer(seq, 2)));
      },
      close() {},
    });

  test("no table: the base goes to nft -f at once; the apply sends the rest, the elements on the socket", async () => {
    const { exec, calls } = recorder();
    const sent: Uint8Array[] = [];
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, kernel([], sent));
    const { all, ahead } = load();
    const started = await runner.startFirstLoad(() => ahead);
    expect(scripts(calls)).toEqual(["create table ip kpng\nadd map ip kpng m { type ipv4_addr : verdict; }\n"]);
    // no listing of the tables: the kernel said they do not exist
    expect(calls.filter((c) => c.argv.includes("list"))).toEqual([]);
    await runner.apply(all, { full: true, fresh: true, ahead: started });
    expect(scripts(calls).slice(1)).toEqual(["add chain ip kpng c\n"]);
    expect(sent.length).toBe(2); // the question, then the elements
  });

  test("a table exists: nothing is sent ahead", async () => {
    const { exec, calls } = recorder();
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, kernel([10]));
    expect(await runner.startFirstLoad(() => load().ahead)).toBeUndefined();
    expect(calls).toEqual([]);
  });

  test("first loads not through kpng's socket: nothing is asked or sent ahead", async () => {
    const { exec, calls } = recorder();
    const runner = new NftRunner(exec, undefined, memoryLogger());
    expect(await runner.startFirstLoad(() => load().ahead)).toBeUndefined();
    expect(calls).toEqual([]);
  });

  test("a base nft refuses fails the apply, and nothing more is sent", async () => {
    const { exec, calls } = recorder((_, stdin) => (stdin?.startsWith("create table") ? "File exists" : undefined));
    const sent: Uint8Array[] = [];
    const runner = new NftRunner(exec, undefined, memoryLogger(), undefined, kernel([], sent));
    const { all, ahead } = load();
    const started = await runner.startFirstLoad(() => ahead);
    await expect(runner.apply(all, { full: true, fresh: true, ahead: started })).rejects.toThrow("File exists");
    expect(scripts(calls)).toHaveLength(1);
    expect(sent).toHaveLength(1); // the question only
  });
});

/** a kernel's answer: NFT_MSG_NEWCHAIN for `family` (NFPROTO_*), chain `chain` of table `table` */
function chainAnswer(seq: number, family: number, table: string, chain: string): Uint8Array {
  const attr = (type: number, s: string) => {
    const len = 4 + s.length + 1;
    const b = Buffer.alloc((len + 3) & ~3);
    b.writeUInt16LE(len, 0);
    b.writeUInt16LE(type, 2);
    b.write(`${s}\0`, 4);
    return b;
  };
  const body = Buffer.concat([Buffer.from([family, 0, 0, 0]), attr(1, table), attr(3, chain)]);
  const h = Buffer.alloc(16);
  h.writeUInt32LE(16 + body.length, 0);
  h.writeUInt16LE((10 << 8) | 3, 4);
  h.writeUInt32LE(seq, 8);
  return new Uint8Array(Buffer.concat([h, body]));
}

describe("netlink: does another program's table or chain exist", () => {
  const objects: NftObject[] = [
    { family: "ip", table: "kube-proxy" },
    { family: "ip6", table: "mangle", chain: "KUBE-PROXY-CANARY" },
  ];

  test("NFT_MSG_GETTABLE for a table, NFT_MSG_GETCHAIN (table and chain named) for a chain, numbered from 1", () => {
    const msgs = messages(objectQuery(objects));
    expect(msgs.map((m) => Buffer.from(m.bytes).toString("hex"))).toEqual([
      // len 36, GETTABLE, NLM_F_REQUEST, seq 1; family ip; NFTA_TABLE_NAME "kube-proxy"
      "24000000" + "010a" + "0100" + "01000000" + "00000000" + "02000000" + "0f00" + "0100" + Buffer.from("kube-proxy\0\0").toString("hex"),
      // len 56, GETCHAIN, seq 2; family ip6; NFTA_CHAIN_TABLE "mangle", NFTA_CHAIN_NAME "KUBE-PROXY-CANARY"
      "38000000" +
        "040a" +
        "0100" +
        "02000000" +
        "00000000" +
        "0a000000" +
        "0b00" +
        "0100" +
        Buffer.from("mangle\0\0").toString("hex") +
        "1600" +
        "0300" +
        Buffer.from("KUBE-PROXY-CANARY\0\0\0").toString("hex"),
    ]);
  });

  test("found by what the answer names: the chain, not another of the same table; 'no such' is not found", () => {
    expect(objectsFound(objects, [errorAnswer(1, 2), chainAnswer(2, 10, "mangle", "KUBE-PROXY-CANARY")])).toEqual([false, true]);
    expect(objectsFound(objects, [errorAnswer(1, 2), chainAnswer(2, 10, "mangle", "OTHER")])).toEqual([false, false]);
    expect(objectsFound(objects, [errorAnswer(1, 2), chainAnswer(2, 2, "mangle", "KUBE-PROXY-CANARY")])).toEqual([false, false]);
  });

  test("any other error names the object", () => {
    expect(() => objectsFound(objects, [errorAnswer(2, 1)])).toThrow("asking for chain ip6 mangle KUBE-PROXY-CANARY: errno 1");
  });
});
