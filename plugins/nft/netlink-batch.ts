// A transaction's added set and map elements as one nfnetlink batch, the
// bytes `nft -f` would send for them, built without nft: a first load into
// empty tables spends most of its time in nft's parser and evaluator, not in
// the kernel (executor.ts sends the batch on kpng's own NETLINK_NETFILTER
// socket, netlink-socket.ts). Pure: ops in, bytes out; tested against the
// bytes `nft -f` sent for the same elements (test/nft/netlink-batch.test.ts).
//
// Layout (linux/netlink.h, linux/netfilter/nfnetlink.h, nf_tables.h;
// libnftnl src/set_elem.c): NFNL_MSG_BATCH_BEGIN (res_id NFNL_SUBSYS_NFTABLES,
// big-endian), NFT_MSG_NEWSETELEM messages (nlmsghdr, nfgenmsg, attributes:
// NFTA_SET_ELEM_LIST_TABLE, _SET, _ELEMENTS: NFTA_LIST_ELEM* of
// NFTA_SET_ELEM_KEY / _DATA (NFTA_DATA_VALUE or NFTA_DATA_VERDICT) /
// _USERDATA), NFNL_MSG_BATCH_END. Headers are in host order; the values'
// bytes come from netlink-values.ts.
//
// Only what kpng renders is encoded: sets whose type this file knows, without
// intervals (nft sends an interval as start and end elements it computes,
// merging overlaps for auto-merge: those few elements stay with `nft -f`).
// nft also sends NFTA_SET_ELEM_LIST_SET_ID (the set's id in its own batch);
// the sets exist before this batch, which names them only.

import { comment as commentText, TABLE, type TableFamily } from "./names.ts";
import type { ElementSpec, Op, SetSpec, Transaction } from "./transaction.ts";
import { list, messages, text } from "./netlink.ts";
import { address, type Field, HOST_LE, Unencodable, value, valueLength, Writer } from "./netlink-values.ts";
import { ListElement } from "./render-service.ts";

const NLMSG_HDRLEN = 16;
export const NLMSG_ERROR = 2;
export const NLM_F_REQUEST = 0x1;
const NLM_F_CREATE = 0x400;
/** on an NLMSG_ERROR: the refused message is not copied after nlmsgerr (NETLINK_CAP_ACK), TLVs follow (NETLINK_EXT_ACK) */
const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;
export const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
const NFT_MSG_NEWTABLE = 0;
const NFT_MSG_GETTABLE = 1;
const NFT_MSG_NEWCHAIN = 3;
const NFT_MSG_GETCHAIN = 4;
const NFT_MSG_NEWSETELEM = 12;
const NFTA_TABLE_NAME = 1;
const NFTA_CHAIN_NAME = 3;
const ENOENT = 2;
const NLA_F_NESTED = 0x8000;
export const NFTA_SET_ELEM_LIST_TABLE = 1;
export const NFTA_SET_ELEM_LIST_SET = 2;
export const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
export const NFTA_SET_ELEM_KEY = 1;
export const NFTA_SET_ELEM_DATA = 2;
export const NFTA_SET_ELEM_USERDATA = 6;
export const NFTA_DATA_VALUE = 1;
export const NFTA_DATA_VERDICT = 2;
export const NFTA_VERDICT_CODE = 1;
export const NFTA_VERDICT_CHAIN = 2;
/** libnftnl udata TLV type of an element's comment (NFTNL_UDATA_SET_ELEM_COMMENT) */
export const UDATA_SET_ELEM_COMMENT = 0;
/** enum nlmsgerr_attrs */
const NLMSGERR_ATTR_MSG = 1;
const NLMSGERR_ATTR_OFFS = 2;
/** nfgenmsg.nfgen_family */
export const NFPROTO: Record<TableFamily, number> = { ip: 2, ip6: 10 };
/** NF_DROP, NF_ACCEPT, NFT_CONTINUE, NFT_RETURN; jump and goto carry a chain */
export const VERDICTS: Record<string, number> = { drop: 0, accept: 1, continue: -1, return: -5 };
export const CHAIN_VERDICTS: Record<string, number> = { jump: -3, goto: -4 };
/**
 * The NFTA_SET_ELEM_LIST_ELEMENTS nest of one message stays within what its
 * 16-bit length can say, as libnftnl splits (nftnl_attr_nest_overflow): the
 * elements of a big statement go in several messages of one batch.
 */
const MAX_NEST = 0xffff;

/** how a set's keys and values are laid out */
export interface SetLayout {
  key: Field[];
  /** the key's bytes in the kernel (NFTA_SET_KEY_LEN) */
  keyLength: number;
  /** the NFTA_SET_ELEM_KEY and NFTA_DATA_VALUE attribute headers of every key, as host-order words */
  keyHeaders: [number, number];
  /** absent for a set, "verdict" for a verdict map */
  data?: Field[] | "verdict";
  /** a map's values other than verdicts: their bytes, and their NFTA_SET_ELEM_DATA and NFTA_DATA_VALUE headers, as the key's */
  dataLength?: number;
  dataHeaders?: [number, number];
  /**
   * A bound on one element's bytes but a verdict's (verdictData makes room for its own), made room for
   * past a message's last possible start (encodeOp): a key or value writes at most its length (each
   * field is parsed whole before its bytes are written, or refused), a comment at most 128 characters
   * of UTF-8.
   */
  elementRoom: number;
  /** the key is a dispatch list's (render-service.ts ListElement): a position, after a cluster IP or alone */
  positions: boolean;
}

/** one element of a type the set's declaration names, or a `typeof` expression */
function field(t: string): Field | undefined {
  if (t === "ipv4_addr" || t === "ip daddr" || t === "ip saddr") return "ipv4";
  if (t === "ipv6_addr" || t === "ip6 daddr" || t === "ip6 saddr") return "ipv6";
  if (t === "inet_proto" || t === "meta l4proto") return "proto";
  if (t === "inet_service" || /^(tcp|udp|sctp|th) [sd]port$/.test(t)) return "port";
  if (/^numgen (random|inc) mod \d+$/.test(t)) return "u32";
  return undefined;
}

function fields(part: string): Field[] | undefined {
  const out: Field[] = [];
  for (const t of part.split(" . ")) {
    const f = field(t.trim());
    if (!f) return undefined;
    out.push(f);
  }
  return out;
}

/** struct nlattr { u16 nla_len; u16 nla_type } read as one host-order word */
const attrHeader = (len: number, type: number) => (HOST_LE ? (len | (type << 16)) >>> 0 : ((len << 16) | type) >>> 0);

/** an element's headers and padding, and a comment (at most 128 characters: 3 bytes each in UTF-8) with its headers, generously */
const ELEMENT_ROOM = 96 + 3 * 128 + 16;

/** the headers of a nest `type` holding one NFTA_DATA_VALUE of `length` bytes, known before the value is written (cold code runs a first load: a call less per attribute counts) */
const valueHeaders = (type: number, length: number): [number, number] => [
  attrHeader(4 + ((4 + length + 3) & ~3), type | NLA_F_NESTED),
  attrHeader(4 + length, NFTA_DATA_VALUE),
];

/** the layout of a set kpng declares, or undefined when its elements stay with nft (intervals, a type this file does not know) */
export function setLayout(spec: SetSpec): SetLayout | undefined {
  if (spec.flags?.includes("interval")) return undefined;
  const [k, d, more] = spec.type.split(" : ");
  if (more !== undefined) return undefined;
  const key = fields(k);
  if (!key) return undefined;
  const keyLength = valueLength(key);
  const keyHeaders = valueHeaders(NFTA_SET_ELEM_KEY, keyLength);
  const positions = key.at(-1) === "u32" && (key.length === 1 || (key.length === 2 && (key[0] === "ipv4" || key[0] === "ipv6")));
  const elementRoom = ELEMENT_ROOM + keyLength;
  if (d === undefined) return { key, keyLength, keyHeaders, positions, elementRoom };
  if (d.trim() === "verdict") return { key, keyLength, keyHeaders, data: "verdict", positions, elementRoom };
  const data = fields(d);
  if (!data) return undefined;
  const dataLength = valueLength(data);
  const dataHeaders = valueHeaders(NFTA_SET_ELEM_DATA, dataLength);
  return { key, keyLength, keyHeaders, data, dataLength, dataHeaders, positions, elementRoom: elementRoom + dataLength };
}

function verdict(w: Writer, text: string) {
  const [word, chain, more] = text.trim().split(/\s+/);
  const code = chain === undefined ? VERDICTS[word] : CHAIN_VERDICTS[word];
  if (code === undefined || more !== undefined) throw new Unencodable(text);
  const v = w.begin(NFTA_DATA_VERDICT | NLA_F_NESTED);
  const c = w.begin(NFTA_VERDICT_CODE);
  w.be32(code);
  w.end(c);
  if (chain !== undefined) w.strz(NFTA_VERDICT_CHAIN, chain);
  w.end(v);
}

/** where each element of a message sits, to name the one the kernel refused */
export interface BatchMessage {
  seq: number;
  /** the op (in `EncodedBatch.ops`) its elements come from, and the index of its first element there */
  op: number;
  first: number;
  /** where the message starts in the batch's bytes (its elements' offsets are read from there on a refusal: elementOffsets) */
  at: number;
}

export interface EncodedBatch {
  bytes: Uint8Array;
  /** the element ops encoded, in batch order */
  ops: ElementsOp[];
  messages: BatchMessage[];
  /** how many elements the batch adds */
  elements: number;
}

type ElementsOp = Extract<Op, { kind: "elements" }>;

/** element adds a batch can carry, each with its set's layout */
export interface Batchable {
  elements: { op: ElementsOp; layout: SetLayout }[];
  /** every other op, in order */
  rest: Op[];
}

/** Splits a transaction by what the batch can carry: added elements of sets it declares with a layout this file knows. */
export function batchable(tx: Transaction): Batchable {
  const layouts = new Map<string, SetLayout | undefined>();
  for (const op of tx.ops)
    if ((op.kind === "set" || op.kind === "map") && op.verb === "add") layouts.set(`${op.family} ${op.set.name}`, setLayout(op.set));
  const out: Batchable = { elements: [], rest: [] };
  for (const op of tx.ops) {
    const layout = op.kind === "elements" && op.verb === "add" ? layouts.get(`${op.family} ${op.set}`) : undefined;
    if (op.kind === "elements" && layout && op.items.length) out.elements.push({ op, layout });
    else out.rest.push(op);
  }
  return out;
}

/**
 * How many elements the first round gives a set; each later round gives it
 * at most what it holds after the rounds before (fillRounds).
 */
export const FIRST_ROUND = 256;

/**
 * A first load's elements in rounds, each to be sent as a batch (and
 * committed) of its own: a round adds to a set at most what the set holds
 * after the rounds before it, FIRST_ROUND at first. Why: kpng's sets are
 * kernel hash tables (nft_set_rhash) created for a handful of elements,
 * and the kernel inserts a batch's elements inside the send that carries
 * it. A table filled past its size within one send gets a bigger one
 * chained behind it, and another behind that, since the resize worker runs
 * only once the send returns; every insert meanwhile takes rhashtable's slow
 * path through all of them (Linux 6.18, rhashtable_insert_slow). Rounds that
 * at most double a set let the worker grow its table between sends, so the
 * inserts stay on the fast path. Elements keep their order; an op split
 * between rounds becomes pieces of the same set and verb.
 */
export function fillRounds(elements: Batchable["elements"], first = FIRST_ROUND): Batchable["elements"][] {
  const rounds: Batchable["elements"][] = [];
  // per set: the round its next elements go to, the room left there, what the rounds so far add
  const sets = new Map<string, { round: number; room: number; held: number }>();
  for (const { op, layout } of elements) {
    const name = `${op.family} ${op.set}`;
    let s = sets.get(name);
    if (!s) sets.set(name, (s = { round: 0, room: first, held: 0 }));
    for (let from = 0; from < op.items.length; ) {
      if (s.room === 0) {
        s.round++;
        s.room = Math.max(first, s.held);
      }
      const n = Math.min(s.room, op.items.length - from);
      const piece = n === op.items.length ? op : { ...op, items: op.items.slice(from, from + n) };
      (rounds[s.round] ??= []).push({ op: piece, layout });
      from += n;
      s.room -= n;
      s.held += n;
    }
  }
  return rounds;
}

/**
 * The batch of those elements (none when there are none); an op with an
 * element whose text does not fit its set's type (nothing kpng renders) is
 * left out whole, in `unencoded`, for nft. `seq` numbers the messages.
 */
export function encodeBatch(elements: Batchable["elements"], seq = 1): { batch: EncodedBatch | undefined; unencoded: ElementsOp[] } {
  const w = new Writer();
  const unencoded: ElementsOp[] = [];
  const batch: EncodedBatch = { bytes: w.buf, ops: [], messages: [], elements: 0 };
  header(w, NFNL_MSG_BATCH_BEGIN, seq++, 0);
  for (const { op, layout } of elements) {
    const mark = { at: w.at, messages: batch.messages.length, seq };
    try {
      seq = encodeOp(w, op, layout, batch, seq);
    } catch (err) {
      if (!(err instanceof Unencodable)) throw err;
      w.at = mark.at;
      batch.messages.length = mark.messages;
      seq = mark.seq;
      unencoded.push(op);
      continue;
    }
    batch.ops.push(op);
    batch.elements += op.items.length;
  }
  if (!batch.ops.length) return { batch: undefined, unencoded };
  header(w, NFNL_MSG_BATCH_END, seq, 0);
  batch.bytes = w.buf.subarray(0, w.at);
  return { batch, unencoded };
}

/** batchable and encodeBatch at once: the batch, and every op it does not carry (for `nft -f`) */
export function encodeElements(tx: Transaction): { batch: EncodedBatch | undefined; rest: Op[] } {
  const { elements, rest } = batchable(tx);
  const { batch, unencoded } = encodeBatch(elements);
  return { batch, rest: [...rest, ...unencoded] };
}

/** nlmsghdr (its length set by the caller) and nfgenmsg; a change asks to create (NLM_F_CREATE), a question does not */
/** an nfnetlink message's headers, its length written by the caller (netlink-dump.ts asks with it too) */
export function header(w: Writer, type: number, seq: number, family: number, flags = NLM_F_REQUEST | NLM_F_CREATE) {
  w.room(NLMSG_HDRLEN + 4);
  const start = w.at;
  w.u32(NLMSG_HDRLEN + 4);
  const batchMsg = type === NFNL_MSG_BATCH_BEGIN || type === NFNL_MSG_BATCH_END;
  w.u16(batchMsg ? type : (NFNL_SUBSYS_NFTABLES << 8) | type);
  w.u16(batchMsg ? NLM_F_REQUEST : flags);
  w.u32(seq);
  w.u32(0);
  w.u8(family);
  w.u8(0); // NFNETLINK_V0
  // res_id, big-endian: the subsystem on batch messages
  w.u8(0);
  w.u8(batchMsg ? NFNL_SUBSYS_NFTABLES : 0);
  return start;
}

function encodeOp(w: Writer, op: ElementsOp, layout: SetLayout, batch: EncodedBatch, seq: number): number {
  const opIndex = batch.ops.length;
  let i = 0;
  while (i < op.items.length) {
    // room for the message's headers and all its elements at once: its nest stops past MAX_NEST, its last
    // element taking at most elementRoom (a verdict makes its own)
    w.room(NLMSG_HDRLEN + 4 + 16 + 260 + MAX_NEST + layout.elementRoom);
    const msgStart = header(w, NFT_MSG_NEWSETELEM, seq, NFPROTO[op.family]);
    w.strz(NFTA_SET_ELEM_LIST_TABLE, TABLE);
    w.strz(NFTA_SET_ELEM_LIST_SET, op.set);
    const nest = w.begin(NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED);
    const msg: BatchMessage = { seq, op: opIndex, first: i, at: msgStart };
    for (; i < op.items.length; i++) {
      const e = op.items[i];
      const start = w.at;
      // each element's attribute type is its place in the message, from 1, as libnftnl numbers them (the kernel reads any)
      element(w, layout, i - msg.first + 1, e);
      if (w.at - nest > MAX_NEST) {
        if (i === msg.first) throw new Unencodable(e.key);
        w.at = start;
        break;
      }
    }
    w.end(nest);
    w.put32(msgStart, w.at - msgStart);
    batch.messages.push(msg);
    seq++;
  }
  return seq;
}

function verdictData(w: Writer, text: string) {
  const cache = w.verdicts;
  let bytes = cache.get(text);
  if (!bytes) {
    w.room(32 + 3 * text.length);
    const start = w.at;
    const d = w.begin(NFTA_SET_ELEM_DATA | NLA_F_NESTED);
    verdict(w, text);
    w.end(d);
    cache.set(text, (bytes = w.buf.slice(start, w.at)));
    w.at = start;
  }
  w.room(bytes.length);
  w.bytes(bytes);
}

/** a list position's key from its parts: the cluster IP's bytes (parsed once a segment), then the position, as numgen gives it */
function positionKey(w: Writer, layout: SetLayout, e: ListElement) {
  const first = layout.key[0];
  if (e.position >>> 0 !== e.position) throw new Unencodable(e.key);
  if (e.ip !== undefined) {
    if (first !== "ipv4" && first !== "ipv6") throw new Unencodable(e.key);
    // 4 or 16 bytes from a 4-byte boundary: the position follows on one, as the key began
    address(w, first, e.ip);
  } else if (layout.key.length !== 1) throw new Unencodable(e.key);
  w.words[w.at >> 2] = e.position;
  w.at += 4;
}

function element(w: Writer, layout: SetLayout, index: number, e: ElementSpec) {
  // Every attribute starts on a 4-byte boundary (each ends padded): the element's header is one word,
  // written once its length is known, and the key's two headers (its length is the set's) follow it.
  const el = w.at;
  const words = w.words;
  words[(el >> 2) + 1] = layout.keyHeaders[0];
  words[(el >> 2) + 2] = layout.keyHeaders[1];
  const kv = (w.at = el + 12);
  if (layout.positions && e instanceof ListElement) positionKey(w, layout, e);
  else value(w, layout.key, e.key);
  if (w.at - kv !== layout.keyLength) throw new Unencodable(e.key);
  w.pad();
  const { value: data, comment } = e;
  if (layout.data) {
    if (data === undefined) throw new Unencodable(e.key);
    if (layout.data === "verdict") verdictData(w, data);
    else {
      // on a 4-byte boundary too: the key ended padded
      const at = w.at;
      w.words[at >> 2] = layout.dataHeaders![0];
      w.words[(at >> 2) + 1] = layout.dataHeaders![1];
      const dv = (w.at = at + 8);
      value(w, layout.data, data);
      if (w.at - dv !== layout.dataLength) throw new Unencodable(data);
      w.pad();
    }
  } else if (data !== undefined) throw new Unencodable(e.key);
  if (comment) {
    const text = commentText(comment);
    const u = w.begin(NFTA_SET_ELEM_USERDATA);
    w.u8(UDATA_SET_ELEM_COMMENT);
    const len = w.at;
    w.u8(0);
    w.str(text);
    w.u8(0);
    const n = w.at - len - 1;
    if (n > 0xff) throw new Unencodable(comment);
    w.buf[len] = n;
    w.end(u);
  }
  w.words[el >> 2] = attrHeader(w.at - el, index | NLA_F_NESTED);
}

/** one answer of the kernel to a batch: an error (or ack) for the message `seq` */
export interface BatchReply {
  seq: number;
  /** 0 for an ack, else a negative errno */
  error: number;
  /** the kernel's words (NLMSGERR_ATTR_MSG) */
  message?: string;
  /** the offset in the refused message of the attribute it refused (NLMSGERR_ATTR_OFFS) */
  offset?: number;
}

/** the NLMSG_ERROR messages in one datagram read after sending a batch */
export function parseReplies(datagram: Uint8Array): BatchReply[] {
  const out: BatchReply[] = [];
  for (const [type, flags, body] of messages(datagram)) {
    if (type !== NLMSG_ERROR || body.byteLength < 4 + NLMSG_HDRLEN) continue;
    // struct nlmsgerr: the error, then the header of the message it answers (its payload too when not capped)
    const v = new DataView(body.buffer, body.byteOffset, body.byteLength);
    const reply: BatchReply = { seq: v.getUint32(12, HOST_LE), error: v.getInt32(0, HOST_LE) };
    if (flags & NLM_F_ACK_TLVS) {
      const answered = flags & NLM_F_CAPPED ? NLMSG_HDRLEN : (v.getUint32(4, HOST_LE) + 3) & ~3;
      for (const [t, payload] of list(body.subarray(4 + answered))) {
        if (t === NLMSGERR_ATTR_MSG) reply.message = text(payload);
        else if (t === NLMSGERR_ATTR_OFFS && payload.byteLength >= 4)
          reply.offset = new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0, HOST_LE);
      }
    }
    out.push(reply);
  }
  return out;
}

/** each element's NFTA_LIST_ELEM offset from the start of its message, read back from the batch (only a refusal asks) */
export function elementOffsets(batch: EncodedBatch, msg: BatchMessage): number[] {
  const v = new DataView(batch.bytes.buffer, batch.bytes.byteOffset + msg.at, batch.bytes.byteLength - msg.at);
  const out: number[] = [];
  const end = v.getUint32(0, HOST_LE);
  // the message's attributes: the table, the set, then the nest of elements
  for (let at = NLMSG_HDRLEN + 4; at + 4 <= end; ) {
    const len = v.getUint16(at, HOST_LE);
    if ((v.getUint16(at + 2, HOST_LE) & ~NLA_F_NESTED) === NFTA_SET_ELEM_LIST_ELEMENTS)
      for (let e = at + 4; e + 4 <= at + len; e += (v.getUint16(e, HOST_LE) + 3) & ~3) out.push(e);
    at += (len + 3) & ~3;
  }
  return out;
}

/**
 * What a refusal is about, as nft would point at it: the element at the
 * refused offset of the refused message, else the statement of that message,
 * else the batch.
 */
export function refusedElement(batch: EncodedBatch, reply: BatchReply): string {
  const msg = batch.messages.find((m) => m.seq === reply.seq);
  if (!msg) return "the element batch";
  const op = batch.ops[msg.op];
  const head = `add element ${op.family} ${TABLE} ${op.set}`;
  if (reply.offset === undefined) return head;
  const offsets = elementOffsets(batch, msg);
  let i = -1;
  for (let j = 0; j < offsets.length && offsets[j] <= reply.offset; j++) i = j;
  if (i < 0) return head;
  const e = op.items[msg.first + i];
  return `${head} { ${e.key}${e.value !== undefined ? ` : ${e.value}` : ""} }`;
}

/** a table, or a chain of one, that a question names (another program's: iptables-nft's `mangle`, kube-proxy's `kube-proxy`) */
export interface NftObject {
  family: TableFamily;
  table: string;
  chain?: string;
}

/**
 * Asks whether each object exists: one NFT_MSG_GETTABLE or NFT_MSG_GETCHAIN
 * per object, outside any batch (a question commits nothing), `seq`
 * numbering them from 1 in order. The kernel answers each within the send
 * that carries it (netlink-socket.ts BatchSocket): the object, or an error.
 * Each answer is one object's: the cost does not grow with the ruleset.
 */
export function objectQuery(objects: readonly NftObject[]): Uint8Array {
  const w = new Writer();
  objects.forEach((o, i) => {
    const start = header(w, o.chain === undefined ? NFT_MSG_GETTABLE : NFT_MSG_GETCHAIN, i + 1, NFPROTO[o.family], NLM_F_REQUEST);
    w.strz(NFTA_TABLE_NAME, o.table); // NFTA_CHAIN_TABLE too
    if (o.chain !== undefined) w.strz(NFTA_CHAIN_NAME, o.chain);
    w.put32(start, w.at - start);
  });
  return w.buf.slice(0, w.at);
}

/** Which of objectQuery's `objects` the kernel's answers show (by index); throws on any error but "no such table or chain". */
export function objectsFound(objects: readonly NftObject[], answers: readonly Uint8Array[]): boolean[] {
  const found = objects.map(() => false);
  const NEWTABLE = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE;
  const NEWCHAIN = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWCHAIN;
  for (const a of answers) {
    for (const [type, , body] of messages(a)) {
      if ((type !== NEWTABLE && type !== NEWCHAIN) || body.byteLength < 4) continue;
      const named = new Map<number, string | undefined>();
      for (const [t, payload] of list(body.subarray(4))) named.set(t, text(payload));
      objects.forEach((o, i) => {
        const isChain = o.chain !== undefined;
        if (NFPROTO[o.family] !== body[0] || isChain !== (type === NEWCHAIN) || named.get(NFTA_TABLE_NAME) !== o.table) return;
        if (!isChain || named.get(NFTA_CHAIN_NAME) === o.chain) found[i] = true;
      });
    }
    for (const r of parseReplies(a))
      if (r.error < 0 && r.error !== -ENOENT) {
        const o = objects[r.seq - 1];
        const what = o ? `${o.chain === undefined ? "table" : "chain"} ${o.family} ${o.table}${o.chain ? ` ${o.chain}` : ""}` : "?";
        throw new Error(`asking for ${what}: errno ${-r.error}${r.message ? ` (${r.message})` : ""}`);
      }
  }
  return found;
}

/** Asks whether kpng's table of each family exists (objectQuery). */
export const tableQuery = (families: readonly TableFamily[]): Uint8Array =>
  objectQuery(families.map((family) => ({ family, table: TABLE })));

/** The families (of tableQuery's `families`) whose table the kernel's answers show; throws on any error but "no such table". */
export function tablesFound(families: readonly TableFamily[], answers: readonly Uint8Array[]): Set<TableFamily> {
  const found = new Set<TableFamily>();
  for (const a of answers) {
    for (const [type, , body] of messages(a))
      if (type === ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE) && body.byteLength >= 4) {
        const family = families.find((f) => NFPROTO[f] === body[0]);
        if (family) found.add(family);
      }
    for (const r of parseReplies(a))
      if (r.error < 0 && r.error !== -ENOENT)
        throw new Error(`asking for table ${families[r.seq - 1] ?? "?"} ${TABLE}: errno ${-r.error}${r.message ? ` (${r.message})` : ""}`);
  }
  return found;
}
