// The kernel's nftables change events as they come off a NETLINK_NETFILTER
// socket (netlink-socket.ts), parsed without libnftnl: only what the watch on
// kpng's tables needs (watch.ts) — which object, family and table each event
// is about, the elements added to kpng's `sync-stamp` set, and the end of
// each committed batch (NFT_MSG_NEWGEN). Pure: bytes in, events out; tested
// on datagrams captured from the kernel (test/nft/netlink.test.ts).
//
// Layout (linux/netlink.h, linux/netfilter/nfnetlink.h, nf_tables.h): a
// datagram holds nlmsghdr-framed messages (len u32, type u16, flags u16,
// seq u32, pid u32; host order), each type NFNL_SUBSYS_NFTABLES << 8 |
// NFT_MSG_*, then nfgenmsg (family u8, version u8, res_id u16), then
// attributes (len u16, type u16, payload, padded to 4 bytes; nested ones
// hold attributes). Integers inside attributes are big-endian.

import { SYNC_STAMP_SET, TABLE } from "./names.ts";

const NLMSG_HDRLEN = 16;
const NFGENMSG_LEN = 4;
const NFNL_SUBSYS_NFTABLES = 10;
/** the nlmsg types below 16 are netlink's own (NLMSG_NOOP, ERROR, DONE, OVERRUN) */
const NLMSG_MIN_TYPE = 0x10;
const NLA_TYPE_MASK = 0x3fff; // without NLA_F_NESTED, NLA_F_NET_BYTEORDER

/** enum nf_tables_msg_types: what each message says changed, as `nft monitor` words it */
const MESSAGES: Record<number, [verb: string, object: string]> = {
  0: ["add", "table"], // NFT_MSG_NEWTABLE
  2: ["delete", "table"], // NFT_MSG_DELTABLE
  3: ["add", "chain"], // NFT_MSG_NEWCHAIN
  5: ["delete", "chain"],
  6: ["add", "rule"], // NFT_MSG_NEWRULE
  8: ["delete", "rule"],
  9: ["add", "set"], // NFT_MSG_NEWSET
  11: ["delete", "set"],
  12: ["add", "element"], // NFT_MSG_NEWSETELEM
  14: ["delete", "element"], // NFT_MSG_DELSETELEM
  18: ["add", "object"], // NFT_MSG_NEWOBJ
  20: ["delete", "object"],
  22: ["add", "flowtable"], // NFT_MSG_NEWFLOWTABLE
  24: ["delete", "flowtable"],
};
const NFT_MSG_NEWGEN = 15;
const NFT_MSG_NEWSETELEM = 12;
const NFT_MSG_DELSETELEM = 14;
/** NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE, NFTA_FLOWTABLE_TABLE */
const ATTR_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_LIST_ELEM = 1;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_DATA_VALUE = 1;
const NFTA_GEN_ID = 1;
const NFTA_GEN_PROC_PID = 2;
const NFTA_GEN_PROC_NAME = 3;

/** nfgenmsg.nfgen_family (NFPROTO_*) as nft names it */
const FAMILIES: Record<number, string> = { 1: "inet", 2: "ip", 3: "arp", 5: "netdev", 7: "bridge", 10: "ip6" };

export type NftEvent =
  | { kind: "change"; verb: string; object: string; family: string; table: string; set?: string; keys?: string[] }
  /** a committed batch ended (NFT_MSG_NEWGEN) */
  | { kind: "generation"; id: number; pid: number; comm: string };

type Attrs = Map<number, Uint8Array>;

/** the attributes in `b`, by type (the last of a type wins; lists are read with `list`) */
function attrs(b: Uint8Array): Attrs {
  const out: Attrs = new Map();
  for (const [type, payload] of list(b)) out.set(type, payload);
  return out;
}

/** the attributes in `b`, in order: type and payload */
export function* list(b: Uint8Array): Generator<[number, Uint8Array]> {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  for (let at = 0; at + 4 <= b.byteLength; ) {
    const len = v.getUint16(at, true);
    if (len < 4 || at + len > b.byteLength) return; // malformed: the rest is unreadable
    yield [v.getUint16(at + 2, true) & NLA_TYPE_MASK, b.subarray(at + 4, at + len)];
    at += (len + 3) & ~3;
  }
}

const decoder = new TextDecoder();
/** an NLA_STRING (or an ifname key): up to its first NUL */
export function text(b: Uint8Array | undefined): string | undefined {
  if (!b) return undefined;
  const nul = b.indexOf(0);
  return decoder.decode(nul < 0 ? b : b.subarray(0, nul));
}
const u32be = (b: Uint8Array | undefined) => (b && b.byteLength >= 4 ? new DataView(b.buffer, b.byteOffset, 4).getUint32(0, false) : 0);

/** the messages in a datagram, in order: type, flags and what follows the header */
export function* messages(datagram: Uint8Array): Generator<[type: number, flags: number, body: Uint8Array]> {
  const v = new DataView(datagram.buffer, datagram.byteOffset, datagram.byteLength);
  for (let at = 0; at + NLMSG_HDRLEN <= datagram.byteLength; ) {
    const len = v.getUint32(at, true);
    if (len < NLMSG_HDRLEN || at + len > datagram.byteLength) return;
    yield [v.getUint16(at + 4, true), v.getUint16(at + 6, true), datagram.subarray(at + NLMSG_HDRLEN, at + len)];
    at += (len + 3) & ~3;
  }
}

/** The nftables events in one datagram read from the socket; anything else in it is skipped. */
export function parseNftEvents(datagram: Uint8Array): NftEvent[] {
  const events: NftEvent[] = [];
  for (const [type, , body] of messages(datagram)) {
    if (type < NLMSG_MIN_TYPE || type >> 8 !== NFNL_SUBSYS_NFTABLES || body.byteLength < NFGENMSG_LEN) continue;
    const event = nftEvent(type & 0xff, body[0], attrs(body.subarray(NFGENMSG_LEN)));
    if (event) events.push(event);
  }
  return events;
}

function nftEvent(msg: number, family: number, a: Attrs): NftEvent | undefined {
  if (msg === NFT_MSG_NEWGEN)
    return {
      kind: "generation",
      id: u32be(a.get(NFTA_GEN_ID)),
      pid: u32be(a.get(NFTA_GEN_PROC_PID)),
      comm: text(a.get(NFTA_GEN_PROC_NAME)) ?? "",
    };
  const table = text(a.get(ATTR_TABLE));
  if (table === undefined) return undefined;
  // a message this list does not know (a newer kernel's) is still a change to its table
  const [verb, object] = MESSAGES[msg] ?? ["change", `object-${msg}`];
  const event: NftEvent = { kind: "change", verb, object, family: FAMILIES[family] ?? `family-${family}`, table };
  if (msg === NFT_MSG_NEWSETELEM || msg === NFT_MSG_DELSETELEM) {
    event.set = text(a.get(NFTA_SET_ELEM_LIST_SET));
    // only the stamp's added keys are read: other sets' elements can be many, and are not needed
    if (msg === NFT_MSG_NEWSETELEM && table === TABLE && event.set === SYNC_STAMP_SET)
      event.keys = elementKeys(a.get(NFTA_SET_ELEM_LIST_ELEMENTS));
  }
  return event;
}

/** NFTA_SET_ELEM_LIST_ELEMENTS → NFTA_LIST_ELEM* → NFTA_SET_ELEM_KEY → NFTA_DATA_VALUE, read as text (the stamp set's type is ifname) */
function elementKeys(elements: Uint8Array | undefined): string[] {
  const keys: string[] = [];
  if (!elements) return keys;
  for (const [type, elem] of list(elements)) {
    if (type !== NFTA_LIST_ELEM) continue;
    const key = attrs(elem).get(NFTA_SET_ELEM_KEY);
    const value = key && text(attrs(key).get(NFTA_DATA_VALUE));
    if (value !== undefined) keys.push(value);
  }
  return keys;
}

/**
 * An event as lines of `nft monitor` would begin — "add element ip kpng
 * sync-stamp { "k-…" }" (one line per stamp key, as the monitor prints
 * them), "delete table ip6 kpng", "# new generation 7 by process 42 (nft)" —
 * so the watch reads both sources alike.
 */
export function eventLines(e: NftEvent): string[] {
  if (e.kind === "generation") return [`# new generation ${e.id} by process ${e.pid} (${e.comm})`];
  const head = `${e.verb} ${e.object} ${e.family} ${e.table}`;
  if (e.set === undefined) return [head];
  if (!e.keys?.length) return [`${head} ${e.set}`];
  return e.keys.map((k) => `${head} ${e.set} { ${JSON.stringify(k)} }`);
}
