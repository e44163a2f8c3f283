// Protobuf decoders made from the field tables (brain/k8s/fields.ts), once,
// at module load: for each table, the source of one function (a loop and a
// switch over its field keys, written as the hand-written decoders were) is
// generated and compiled with `new Function`.
//
// Why generated source and not a generic loop over the table: this runs for
// every field of 10,000s of objects at start-up, cold, under the compiled
// binary's reluctant JIT, where a call costs more than the read itself
// (wire.ts). A loop calling one closure per field adds a call per field and
// makes that call site megamorphic; the generated switch over constant keys
// is a jump table with the reads inline, the code the hand-written decoders
// had. Why not a script writing the decoders into a file: the tables would
// then be read by the build, not by kpng, and one more step could go stale;
// the source is small and `decoderSource` shows it (test/sources/compile.test.ts).
//
// Two decoders per table:
// - `decoderOf`: the message in the shape its JSON has (what JSON.parse
//   gives for the same object from the same API server), for parseObject to
//   read: a zero string or number is left out where the JSON tag says
//   omitempty, kept where it does not, a pointer field kept whenever it is on
//   the wire, a nil list without omitempty is null;
// - `checkedOf`: the message straight into the object the hand-written
//   check (fields.ts objectCheck) makes of that JSON, or null where the check
//   would refuse it: values kept in locals, defaults and checks applied at
//   the end, keys written in the table's order.

import { FAIL } from "../../brain/k8s/fast-check.ts";
import type { Field, ProtoField, ProtoTable, Table, Wire } from "../../brain/k8s/fields.ts";
import { key, LEN, ProtoError, VARINT, type Reader } from "./wire.ts";

export type Raw = Record<string, unknown>;
export type Decode = (r: Reader, end: number) => Raw;
export type CheckedDecode = (r: Reader, end: number) => Raw | null;

/** map<string,string> entry: key = 1, value = 2, added to `map` */
export function mapEntry(map: Record<string, string>, r: Reader, end: number) {
  let k = "";
  let value = "";
  while (r.pos < end) {
    let t = r.buf[r.pos]; // a key is one byte for every field kpng reads: no call for it
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 10) k = r.atom(end);
    else if (t === 18) value = r.string(end);
    else r.skip(t, end);
  }
  r.done(end);
  map[k] = value;
}

/** IntOrString: type 1 (0 int, 1 string), intVal 2, strVal 3 */
export function intOrString(r: Reader, end: number): number | string {
  let type = 0;
  let int = 0;
  let str = "";
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 8) type = r.int64();
    else if (t === 16) int = r.int32();
    else if (t === 26) str = r.string(end);
    else r.skip(t, end);
  }
  r.done(end);
  return type === 1 ? str : int;
}

/** metav1.Time (seconds = 1, nanos = 2) as its JSON: RFC 3339, whole seconds, UTC */
export function time(r: Reader, end: number): string {
  let seconds = 0;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 8) seconds = r.int64();
    else r.skip(t, end);
  }
  r.done(end);
  const date = new Date(seconds * 1000);
  // past what a Date holds (Go's JSON cannot write such a time either): bad bytes for this object, not for the answer
  if (Number.isNaN(date.getTime())) throw new ProtoError(`a time out of range (${seconds} s)`);
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

const WIRE_TYPE: Record<string, number> = { int32: VARINT, bool: VARINT };
const wireType = (w: Wire) => (typeof w === "string" ? (WIRE_TYPE[w] ?? LEN) : LEN);
const keyOf = (f: ProtoField) => key(f.proto, wireType(f.wire));

/** the expression reading one value of `wire`; `dep` names a function the generated code is handed */
function readExpr(wire: Wire, dep: (value: unknown) => string): string {
  switch (wire) {
    case "string":
      return "r.string(end)";
    case "atom":
      return "r.atom(end)";
    case "int32":
      return "r.int32()";
    case "bool":
      return "r.bool()";
    case "intOrString":
      return `${dep(intOrString)}(r, r.sub(end))`;
    case "time":
      return `${dep(time)}(r, r.sub(end))`;
    case "map":
      throw new Error("a map is read by its own statement");
    default:
      return `${dep(decoderOf(wire))}(r, r.sub(end))`;
  }
}

/** the zero value Go's JSON leaves out of an omitempty field, or null if none (a message, a list: their own rules) */
const zeroOf = (wire: Wire) => (wire === "string" || wire === "atom" ? '""' : wire === "int32" ? "0" : null);

/** Function's parameters and arguments: the helpers the generated source calls */
class Deps {
  readonly names: string[] = [];
  readonly values: unknown[] = [];
  readonly name = (value: unknown): string => {
    let i = this.values.indexOf(value);
    if (i < 0) i = this.values.push(value) - 1;
    this.names[i] = `d${i}`;
    return this.names[i];
  };
}

const prop = (name: string) => `o[${JSON.stringify(name)}]`;

/** The source of `table`'s JSON-shape decoder (a function of r and end). */
export function decoderSource(table: ProtoTable, deps = new Deps()): string {
  const cases: string[] = [];
  const after: string[] = [];
  for (const [name, f] of Object.entries(table)) {
    const to = prop(name);
    let body: string;
    if (f.wire === "map") body = `${deps.name(mapEntry)}(${to} ??= {}, r, r.sub(end));`;
    else if (f.repeated) {
      body = `(${to} ??= []).push(${readExpr(f.wire, deps.name)});`;
      if (f.presence === "always") after.push(`${to} ??= null;`); // no omitempty: a nil list is null in JSON
    } else {
      const zero = zeroOf(f.wire);
      body =
        f.presence === "omitempty" && zero !== null
          ? `{ const x = ${readExpr(f.wire, deps.name)}; if (x !== ${zero}) ${to} = x; }`
          : `${to} = ${readExpr(f.wire, deps.name)};`;
    }
    cases.push(`case ${keyOf(f)}: ${body} break;`);
  }
  return messageSource({ before: ["const o = {};"], cases, after: [...after, "return o;"] });
}

/** The source of `table`'s checked decoder: see the header. */
export function checkedSource(table: Table, deps = new Deps()): string {
  const cases: string[] = [];
  const ends: string[] = [];
  const writes: string[] = [];
  const FAILED = deps.name(FAIL);
  Object.entries(table).forEach(([name, f]: [string, Field], i) => {
    const local = `v${i}`;
    const check = deps.name(f.kind.check);
    // one value, checked as it is read when it is a list's item or a message (its check says yes or no at once)
    let item: string;
    if (typeof f.wire === "object" && f.kind.table === f.wire)
      item = `const x = ${deps.name(checkedOf(f.kind.table))}(r, r.sub(end)); if (x === null) return null;`;
    else if (typeof f.wire === "object" || f.repeated || f.wire === "intOrString")
      item = `const x = ${check}(${readExpr(f.wire, deps.name)}); if (x === ${FAILED}) return null;`;
    else item = "";
    let body: string;
    if (f.wire === "map") throw new Error(`${name}: a map is not read by a checked decoder`);
    if (f.repeated) body = `{ ${item} (${local} ??= []).push(x); }`;
    else if (item) body = `{ ${item} ${local} = x; }`;
    else {
      const zero = zeroOf(f.wire);
      body =
        f.presence === "omitempty" && zero !== null
          ? `{ const x = ${readExpr(f.wire, deps.name)}; if (x !== ${zero}) ${local} = x; }`
          : `${local} = ${readExpr(f.wire, deps.name)};`;
      // a scalar is checked at the end, once, with its default
      const def = f.default === undefined ? "" : `if (${local} === undefined) ${local} = ${JSON.stringify(f.default)}; `;
      const missing = f.required ? `if (${local} === undefined) return null; ` : "";
      ends.push(`${def}${missing}if (${local} !== undefined && ${check}(${local}) === ${FAILED}) return null;`);
    }
    cases.push(`case ${keyOf(f)}: ${body} break;`);
    writes.push(`if (${local} !== undefined) ${prop(name)} = ${local};`);
  });
  const locals = `let ${Object.keys(table)
    .map((_, i) => `v${i}`)
    .join(", ")};`;
  return messageSource({ before: [locals], cases, after: [...ends, "const o = {};", ...writes, "return o;"] });
}

/** a function of r and end reading a message's fields: `cases` of its switch, what comes `before` and `after` the loop */
function messageSource(o: { before: string[]; cases: string[]; after: string[] }): string {
  return `function (r, end) {
  ${o.before.join("\n  ")}
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    switch (t) {
      ${o.cases.join("\n      ")}
      default: r.skip(t, end);
    }
  }
  r.done(end);
  ${o.after.join("\n  ")}
}`;
}

function compile<T>(source: (deps: Deps) => string): T {
  const deps = new Deps();
  const src = source(deps);
  return new Function(...deps.names, `"use strict"; return ${src};`)(...deps.values) as T;
}

const decoders = new WeakMap<ProtoTable, Decode>();
const checkedDecoders = new WeakMap<Table, CheckedDecode>();

/** `table`'s JSON-shape decoder, made once */
export function decoderOf(table: ProtoTable): Decode {
  let d = decoders.get(table);
  if (!d) decoders.set(table, (d = compile<Decode>((deps) => decoderSource(table, deps))));
  return d;
}

/** `table`'s checked decoder, made once */
export function checkedOf(table: Table): CheckedDecode {
  let d = checkedDecoders.get(table);
  if (!d) checkedDecoders.set(table, (d = compile<CheckedDecode>((deps) => checkedSource(table, deps))));
  return d;
}
