// kpng's tables read back on its own netlink socket, for `verify`
// (verify.ts): chains, rules (their comments), sets and set elements, dumped
// with NFT_MSG_GET* requests and decoded here. Why not `nft -j list table`:
// nft 1.0.6 builds its whole cache and prints every element through its
// evaluator, which grows faster than the table (0.8 s at 1,000 services of
// 10 endpoints, 3.9 s at 3,000, on the test machine); the dump is the
// kernel's bytes, read in milliseconds.
//
// Elements are decoded into the text kpng renders (addresses, protocol
// names, ports, positions joined with " . "; verdicts as `goto chain`), with
// the layout of the set kpng declared (netlink-batch.ts setLayout); a rule
// is known by its comment only (libnftnl's udata TLV): its expressions are
// not decoded. Interval sets are left out: their elements come back as
// start and end keys (verify.ts reads that one small set with nft).
//
// Layout: linux/netfilter/nf_tables.h; the replies are NFT_MSG_NEW* messages
// of a multipart dump ending with NLMSG_DONE.

import { ipv6Text } from "../../src/host/toolkit/index.ts";
import {
  CHAIN_VERDICTS,
  header,
  NFNL_SUBSYS_NFTABLES,
  NFPROTO,
  NFTA_DATA_VALUE,
  NFTA_DATA_VERDICT,
  NFTA_SET_ELEM_DATA,
  NFTA_SET_ELEM_KEY,
  NFTA_SET_ELEM_LIST_ELEMENTS,
  NFTA_SET_ELEM_LIST_SET,
  NFTA_SET_ELEM_USERDATA,
  NFTA_VERDICT_CHAIN,
  NFTA_VERDICT_CODE,
  NLM_F_REQUEST,
  NLMSG_ERROR,
  UDATA_SET_ELEM_COMMENT,
  VERDICTS,
} from "./netlink-batch.ts";
import { list, messages, text } from "./netlink.ts";
import { type Field, HOST_LE, Writer } from "./netlink-values.ts";
import { TABLE, type TableFamily } from "./names.ts";

const NLM_F_DUMP = 0x300;
const NLMSG_DONE = 3;
export const MSG = { newChain: 3, getChain: 4, newRule: 6, getRule: 7, newSet: 9, getSet: 10, newSetElem: 12, getSetElem: 13 } as const;
const NFTA_TABLE = 1; // NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE
const NFTA_CHAIN_NAME = 3;
const NFTA_RULE_CHAIN = 2;
const NFTA_RULE_HANDLE = 3;
const NFTA_RULE_USERDATA = 7;
const NFTA_SET_NAME = 2;
const NFTA_SET_FLAGS = 3;
const NFT_SET_MAP = 0x8;
/** libnftnl udata: NFTNL_UDATA_RULE_COMMENT is NFTNL_UDATA_SET_ELEM_COMMENT's number */
const UDATA_COMMENT = UDATA_SET_ELEM_COMMENT;
const VERDICT_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries({ ...VERDICTS, ...CHAIN_VERDICTS }).map(([k, v]) => [v, k]),
);
const PROTOCOL_NAMES: Record<number, string> = { 6: "tcp", 17: "udp", 132: "sctp" };

export interface DumpedRule {
  chain: string;
  handle: number;
  comment: string;
}

export interface DumpedElement {
  key: Uint8Array;
  /** a map's value bytes, or its verdict as text */
  data?: Uint8Array | string;
  comment: string;
}

/** one NFT_MSG_GET* dump request of kpng's table in `family`; `set` for its elements */
export function dumpRequest(type: number, family: TableFamily, seq: number, set?: string): Uint8Array {
  const w = new Writer();
  const start = header(w, type, seq, NFPROTO[family], NLM_F_REQUEST | NLM_F_DUMP);
  w.strz(NFTA_TABLE, TABLE);
  if (set !== undefined) w.strz(NFTA_SET_ELEM_LIST_SET, set);
  w.put32(start, w.at - start);
  return w.buf.slice(0, w.at);
}

/** an error answer to a dump: `errno` 2 (ENOENT) when the table or set does not exist */
export class DumpError extends Error {
  constructor(
    message: string,
    readonly errno: number,
  ) {
    super(message);
  }
}

export const REQUEST = { chains: MSG.getChain, rules: MSG.getRule, sets: MSG.getSet, elements: MSG.getSetElem } as const;

/**
 * The messages of one dump's answers, each as its attributes; throws on an
 * error answer, and when the dump did not end (NLMSG_DONE) within them.
 */
export function dumpMessages(answers: readonly Uint8Array[], newType: number, what: string): Map<number, Uint8Array>[] {
  const out: Map<number, Uint8Array>[] = [];
  let done = false;
  for (const a of answers)
    for (const [type, , body] of messages(a)) {
      if (type === NLMSG_DONE) done = true;
      else if (type === NLMSG_ERROR) {
        const errno = body.byteLength >= 4 ? new DataView(body.buffer, body.byteOffset, 4).getInt32(0, HOST_LE) : 0;
        if (errno < 0) throw new DumpError(`netlink dump of ${what}: errno ${-errno}`, -errno);
      } else if (type === ((NFNL_SUBSYS_NFTABLES << 8) | newType)) out.push(attrs(body.subarray(4)));
    }
  if (!done) throw new Error(`netlink dump of ${what}: no end in ${answers.length} answers`);
  return out;
}

function attrs(b: Uint8Array): Map<number, Uint8Array> {
  const m = new Map<number, Uint8Array>();
  for (const [t, p] of list(b)) m.set(t, p);
  return m;
}

const be32 = (b: Uint8Array | undefined) => (b && b.byteLength >= 4 ? new DataView(b.buffer, b.byteOffset, 4).getInt32(0, false) : 0);
const be64 = (b: Uint8Array | undefined) =>
  b && b.byteLength >= 8 ? Number(new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, false)) : 0;
const ours = (m: Map<number, Uint8Array>) => text(m.get(NFTA_TABLE)) === TABLE;

/** the comment in a libnftnl udata blob ("" when none) */
function udataComment(b: Uint8Array | undefined): string {
  if (!b) return "";
  for (let at = 0; at + 2 <= b.byteLength; ) {
    const [type, len] = [b[at], b[at + 1]];
    if (type === UDATA_COMMENT) return text(b.subarray(at + 2, at + 2 + len)) ?? "";
    at += 2 + len;
  }
  return "";
}

export const chainsOf = (msgs: Map<number, Uint8Array>[]) => msgs.filter(ours).map((m) => text(m.get(NFTA_CHAIN_NAME)) ?? "");

export const rulesOf = (msgs: Map<number, Uint8Array>[]): DumpedRule[] =>
  msgs.filter(ours).map((m) => ({
    chain: text(m.get(NFTA_RULE_CHAIN)) ?? "",
    handle: be64(m.get(NFTA_RULE_HANDLE)),
    comment: udataComment(m.get(NFTA_RULE_USERDATA)),
  }));

export const setsOf = (msgs: Map<number, Uint8Array>[]) =>
  msgs.filter(ours).map((m) => ({ name: text(m.get(NFTA_SET_NAME)) ?? "", map: (be32(m.get(NFTA_SET_FLAGS)) & NFT_SET_MAP) !== 0 }));

export function elementsOf(msgs: Map<number, Uint8Array>[]): DumpedElement[] {
  const out: DumpedElement[] = [];
  for (const m of msgs) {
    const nest = m.get(NFTA_SET_ELEM_LIST_ELEMENTS);
    if (!nest) continue;
    // offsets walked by hand, no generator or map per attribute: a set at scale has 100,000s of elements
    const v = new DataView(nest.buffer, nest.byteOffset, nest.byteLength);
    for (const [eAt, eEnd] of spans(v, 0, nest.byteLength)) {
      const e: DumpedElement = { key: EMPTY, comment: "" };
      for (const [at, end, type] of spans(v, eAt, eEnd)) {
        if (type === NFTA_SET_ELEM_KEY) e.key = firstIn(nest, v, at, end, NFTA_DATA_VALUE) ?? EMPTY;
        else if (type === NFTA_SET_ELEM_USERDATA) e.comment = udataComment(nest.subarray(at, end));
        else if (type === NFTA_SET_ELEM_DATA) {
          const verdict = firstIn(nest, v, at, end, NFTA_DATA_VERDICT);
          if (!verdict) e.data = firstIn(nest, v, at, end, NFTA_DATA_VALUE);
          else {
            const codeNumber = be32(first(verdict, NFTA_VERDICT_CODE));
            const code = VERDICT_NAMES[codeNumber] ?? `verdict ${codeNumber}`;
            const chain = text(first(verdict, NFTA_VERDICT_CHAIN));
            e.data = chain === undefined ? code : `${code} ${chain}`;
          }
        }
      }
      if (e.key.byteLength) out.push(e);
    }
  }
  return out;
}

const EMPTY = new Uint8Array();

/** the attributes between `from` and `to` of `v`: their payloads' start and end, and type; an array, not a generator (hot) */
function spans(v: DataView, from: number, to: number): [number, number, number][] {
  const out: [number, number, number][] = [];
  for (let at = from; at + 4 <= to; ) {
    const len = v.getUint16(at, HOST_LE);
    if (len < 4 || at + len > to) break;
    out.push([at + 4, at + len, v.getUint16(at + 2, HOST_LE) & 0x3fff]);
    at += (len + 3) & ~3;
  }
  return out;
}

/** the payload of the first attribute of `type` between `from` and `to` */
function firstIn(b: Uint8Array, v: DataView, from: number, to: number, type: number): Uint8Array | undefined {
  for (const [at, end, t] of spans(v, from, to)) if (t === type) return b.subarray(at, end);
  return undefined;
}

/** the payload of the first attribute of `type` in `b` */
function first(b: Uint8Array, type: number): Uint8Array | undefined {
  return firstIn(b, new DataView(b.buffer, b.byteOffset, b.byteLength), 0, b.byteLength, type);
}

const FIELD_BYTES: Record<Field, number> = { ipv4: 4, ipv6: 16, proto: 1, port: 2, u32: 4 };
const groups = new Array<number>(8);

/** a key or value's bytes as kpng writes its text (netlink-values.ts `value`, read back) */
export function decodeValue(fields: readonly Field[], b: Uint8Array): string {
  const parts: string[] = [];
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 0;
  for (const f of fields) {
    if (at + FIELD_BYTES[f] > b.byteLength) return `0x${Buffer.from(b).toString("hex")}`;
    if (f === "ipv4") parts.push(`${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`);
    else if (f === "ipv6") {
      for (let i = 0; i < 8; i++) groups[i] = v.getUint16(at + 2 * i, false);
      parts.push(ipv6Text(groups));
    } else if (f === "proto") parts.push(PROTOCOL_NAMES[b[at]] ?? String(b[at]));
    else if (f === "port") parts.push(String(v.getUint16(at, false)));
    else parts.push(String(v.getUint32(at, HOST_LE)));
    // each field of a concatenation takes whole 32-bit registers
    at += fields.length > 1 ? (FIELD_BYTES[f] + 3) & ~3 : FIELD_BYTES[f];
  }
  return parts.join(" . ");
}
