// Reading what an API server sends, for holding one server's bytes against
// another's (wire-real.test.ts): the envelope of a protobuf answer as a
// shape (field numbers, wire types and the values that are the same by
// nature, at every level down to the items), the keys of a JSON answer at
// every level, and what kpng's own decoders make of either. Values that differ
// by nature (resourceVersion, continue tokens, a Status's message) are
// normalised to a placeholder when set, so an unset one still shows.

import { Checked, parseObject } from "../../../src/core/brain/k8s/objects.ts";
import { hasMagic, ListDecoder, WatchDecoder } from "../../../src/core/sources/protobuf/envelope.ts";

/** What a field holds: a nested message, a string, a varint, a string normalised, or opaque bytes ("item": an object, read by kpng instead). */
type Field = Schema | "str" | "varint" | "item" | ((s: string) => string);
type Schema = { [field: number]: Field };

const set = (what: string) => (s: string) => (s ? `<${what}>` : "");
const listMeta: Schema = { 1: "str", 2: set("resourceVersion"), 3: set("continue"), 4: "varint" };
/** metav1.Status: metadata 1 (ListMeta), status 2, message 3, reason 4, details 5, code 6 */
const status: Schema = {
  1: listMeta,
  2: "str",
  3: set("message"),
  4: "str",
  5: { 1: "str", 2: "str", 3: "str", 4: "str", 5: "varint" },
  6: "varint",
};
/** an object's own top level: metadata 1, spec/endpoints 2, status/ports 3, addressType 4, ... (the rest is kpng's to read) */
const object: Schema = { 1: "item", 2: "item", 3: "item", 4: "str" };
const list: Schema = { 1: listMeta, 2: "item" };

function varint(b: Uint8Array, pos: number): [number, number] {
  let v = 0;
  let mul = 1;
  for (;;) {
    if (pos >= b.length) throw new Error("varint runs past the end");
    const x = b[pos++];
    v += (x & 0x7f) * mul;
    if (x < 0x80) return [v, pos];
    mul *= 128;
  }
}

/** The fields of the message at [start, end) as [field, what it holds], in wire order; unknown fields as their wire type. */
export function shape(b: Uint8Array, start: number, end: number, schema: Schema): unknown[] {
  const out: unknown[] = [];
  let pos = start;
  while (pos < end) {
    const [tag, p] = varint(b, pos);
    const [f, wt] = [Math.floor(tag / 8), tag & 7];
    const s = schema[f];
    if (wt === 0) {
      const [v, q] = varint(b, p);
      out.push([f, s === "varint" ? v : "varint"]);
      pos = q;
    } else if (wt === 2) {
      const [len, q] = varint(b, p);
      const [from, to] = [q, q + len];
      if (to > end) throw new Error(`field ${f} runs past the end of its message`);
      const text = () => new TextDecoder().decode(b.subarray(from, to));
      if (s === "str") out.push([f, text()]);
      else if (typeof s === "function") out.push([f, s(text())]);
      else if (s === "item") out.push([f, "message"]);
      else if (typeof s === "object") out.push([f, shape(b, from, to, s)]);
      else out.push([f, `${len} bytes`]);
      pos = to;
    } else throw new Error(`field ${f}: wire type ${wt}`);
  }
  return out;
}

/** A body: "k8s\0" then runtime.Unknown { typeMeta 1, raw 2, contentEncoding 3, contentType 4 }; raw read as its kind says. */
export function bodyShape(b: Uint8Array, start = 0, end = b.length): unknown {
  if (!hasMagic(b, start)) return { noMagic: Buffer.from(b.subarray(start, Math.min(end, start + 8))).toString("hex") };
  // the kind first: it says what raw is
  let kind = "";
  const typeMeta: Schema = { 1: "str", 2: (k) => ((kind = k), k) };
  shape(b, start + 4, end, { 1: typeMeta });
  const raw = kind === "Status" ? status : kind.endsWith("List") ? list : object;
  return { magic: "k8s\\0", unknown: shape(b, start + 4, end, { 1: typeMeta, 2: raw, 3: "str", 4: "str" }) };
}

/** A watch answer: each frame's 4-byte big-endian length, then a WatchEvent { type 1, object 2: RawExtension { raw 1: a body } }. */
export function framesShape(b: Uint8Array): unknown[] {
  const out: unknown[] = [];
  let pos = 0;
  while (pos < b.length) {
    if (b.length - pos < 4) throw new Error(`${b.length - pos} bytes after the last frame`);
    const len = new DataView(b.buffer, b.byteOffset + pos, 4).getUint32(0);
    const [from, to] = [pos + 4, pos + 4 + len];
    if (to > b.length) throw new Error(`a frame of ${len} bytes with ${b.length - from} left`);
    // a frame wrapped in "k8s\0" + runtime.Unknown shows as such, and differs from a bare WatchEvent
    if (hasMagic(b, from)) out.push({ wrapped: bodyShape(b, from, to) });
    else {
      const inner = innerBody(b, from, to);
      out.push({ event: shape(b, from, to, { 1: "str", 2: { 1: "item" } }), object: inner && bodyShape(b, inner[0], inner[1]) });
    }
    pos = to;
  }
  return out;
}

/** where the object's body lies in a bare WatchEvent at [start, end) */
function innerBody(b: Uint8Array, start: number, end: number): [number, number] | undefined {
  let pos = start;
  while (pos < end) {
    const [tag, p] = varint(b, pos);
    const [len, q] = varint(b, p);
    if (tag === 18) {
      const [t2, p2] = varint(b, q);
      const [l2, q2] = varint(b, p2);
      if (t2 === 10) return [q2, q2 + l2];
    }
    pos = q + len;
  }
  return undefined;
}

/** The keys of a JSON value at every level (objects: sorted keys; arrays: each element), values by type only. */
export function keys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(keys);
  if (v && typeof v === "object")
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, keys((v as Record<string, unknown>)[k])]),
    );
  return v === null ? "null" : typeof v;
}

/** resourceVersions (and a Status's continue token) set to a placeholder, deeply */
export function normalised(v: unknown): unknown {
  if (v instanceof Checked) return normalised({ checked: v.object, metadata: v.metadata });
  if (Array.isArray(v)) return v.map(normalised);
  if (v && typeof v === "object") {
    // a Status's message differs by who answers (the watch cache, etcd), its reason and code do not
    const status = (v as { kind?: unknown }).kind === "Status";
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => [
        k,
        (k === "resourceVersion" || k === "continue" || (status && k === "message")) && typeof x === "string" && x
          ? `<${k}>`
          : normalised(x),
      ]),
    );
  }
  return v;
}

/** What kpng makes of an object it was sent (kind: a list item's, which carries none): the checked object, or the refusal. */
export function reading(o: unknown, kind?: string): unknown {
  if (o instanceof Checked) return normalised(o.object);
  const r = parseObject(o, kind as never);
  return normalised(r.ok ? r.object : r);
}

/** A protobuf List through kpng's ListDecoder: its meta and each item's reading. */
export function readList(kind: string, b: Uint8Array): unknown {
  const d = new ListDecoder(kind);
  // in two pieces, as bytes arrive: the decoder must not care where they split
  const items = [...d.push(b.subarray(0, b.length >> 1)), ...d.push(b.subarray(b.length >> 1))];
  d.end();
  return normalised({ resourceVersion: d.resourceVersion, continue: d.continue, items: items.map((i) => reading(i, kind)) });
}

/** A protobuf watch answer through kpng's WatchDecoder: each event's type and reading (a BOOKMARK's or ERROR's object as decoded). */
export function readWatch(b: Uint8Array): unknown[] {
  const d = new WatchDecoder();
  const events = [...d.push(b.subarray(0, b.length >> 1)), ...d.push(b.subarray(b.length >> 1))];
  return events.map((e) => ({
    type: e.type,
    object: e.type === "BOOKMARK" || e.type === "ERROR" ? normalised(e.object) : reading(e.object),
  }));
}

/** A JSON List as kpng's JSON path reads it. */
export function readJSONList(kind: string, text: string): unknown {
  const l = JSON.parse(text) as { metadata: { resourceVersion: string; continue?: string }; items: unknown[] };
  return normalised({
    resourceVersion: l.metadata.resourceVersion,
    continue: l.metadata.continue ?? "",
    items: l.items.map((i) => reading(i, kind)),
  });
}

/** JSON watch lines as kpng's JSON path reads them. */
export function readJSONWatch(text: string): Array<{ type: string; object: unknown }> {
  return jsonEvents(text).map((e) => ({
    type: e.type,
    object: e.type === "BOOKMARK" || e.type === "ERROR" ? normalised(e.object) : reading(e.object),
  }));
}

export function jsonEvents(text: string): Array<{ type: string; object: Record<string, unknown> }> {
  return text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}
