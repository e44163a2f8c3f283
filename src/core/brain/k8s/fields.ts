// A Kubernetes message described once, as a table of fields: for each its
// JSON name (the table's key, in the order kpng writes the fields), its
// protobuf number and wire kind (generated.proto), how Go writes it (which
// decides when JSON has it), and its value's kind: the hand-written check of
// a well-formed value (fast-check.ts), the valibot schemas of a well-formed
// value and of any value an API server may hold (objects.ts), and, for an
// enum, how kube-proxy reads a value it does not know (read.ts). The
// readers are made from the tables: the valibot schemas and the JSON check
// here (entries, objectCheck), the protobuf decoders in
// sources/protobuf/compile.ts. So a new field of a message is one line in
// its table (service-fields.ts), plus the code that uses it.

import * as v from "valibot";
import { FAIL, isObj, listOf, nullable, oneOf, opt, type Obj, type Parse } from "./fast-check.ts";

/**
 * How a field's value comes on the protobuf wire: a UTF-8 string (`atom`:
 * one of the few that recur across objects, Reader.atom), an int32 or bool
 * varint, a map<string,string> entry, an IntOrString, a metav1.Time, or a
 * message of the given table.
 */
export type Wire = "string" | "atom" | "int32" | "bool" | "map" | "intOrString" | "time" | ProtoTable;

/**
 * How Go writes the field, which decides when its JSON has it:
 * `omitempty`, a plain field tagged omitempty: left out when zero ("", 0);
 * `pointer`, a pointer (proto2 presence): there whenever it is set, zero too;
 * `always`, a plain field without omitempty: always there (a nil list as null).
 * Go's protobuf encoder writes every non-pointer field, zero or not.
 */
export type Presence = "omitempty" | "pointer" | "always";

/** what the protobuf decoders need of a field */
export interface ProtoField {
  readonly proto: number;
  readonly wire: Wire;
  readonly repeated: boolean;
  readonly presence: Presence;
}

/** a message as the protobuf decoders see it: its fields by JSON name */
export type ProtoTable = Readonly<Record<string, ProtoField>>;

/**
 * A value's kind: its hand-written check (the output of a well-formed value,
 * or FAIL), the valibot schema of a well-formed value, and the one of any
 * value an API server may hold (a newer one may send an enum value or an
 * address this version does not take as it is; read.ts reads those).
 */
export interface ValueKind<W extends v.GenericSchema = v.GenericSchema, S extends v.GenericSchema = v.GenericSchema> {
  readonly check: Parse<unknown>;
  readonly wellFormed: W;
  readonly shape: S;
  /** a message's table, when its checked protobuf reader is made from it (not given: `check` of the decoded message) */
  readonly table?: Table;
  /** an enum's values (read.ts notes any other) */
  readonly values?: readonly string[];
}

/** how kube-proxy reads an enum value it does not know (read.ts's note) */
export interface Reading {
  /** values kube-proxy takes beside the well-formed ones (an older name of one) */
  readonly alsoKnown?: readonly string[];
  /** what it does with any other: `Cluster` */
  readonly reading: string;
}

/** A field of a table: its protobuf side, its kind, and the valibot entries made of them. */
export interface Field<W extends v.GenericSchema = v.GenericSchema, S extends v.GenericSchema = v.GenericSchema> extends ProtoField {
  readonly kind: ValueKind;
  /** the output of an absent field (v.optional's default) */
  readonly default: string | undefined;
  /** absent is invalid */
  readonly required: boolean;
  /** the valibot entry of a well-formed value (optional, list or required as the field is) */
  readonly wellFormed: W;
  /** the valibot entry of any value an API server may hold */
  readonly shape: S;
  /** an enum field's reading of an unknown value: the values known, and kube-proxy's reading of others */
  readonly unknown?: { readonly known: ReadonlySet<string>; readonly reading: string };
}

export type Table = Readonly<Record<string, Field>>;

// -- value kinds

export const kind = <W extends v.GenericSchema, S extends v.GenericSchema>(
  check: Parse<unknown>,
  wellFormed: W,
  shape: S,
): ValueKind<W, S> => ({ check, wellFormed, shape });

const text = v.string("must be a string");

/** a string of any value: `check` and both schemas take any */
export const anyString = kind((x) => (typeof x === "string" ? x : FAIL), v.string(), text);

/** v.picklist(values): well-formed when one of them; an API server may hold any string */
export function enumOf<const T extends readonly [string, ...string[]]>(values: T) {
  const message = `must be ${values.slice(0, -1).join(", ")} or ${values.at(-1)}`;
  return { ...kind(oneOf(values), v.picklist(values, message), text), values } as ValueKind<v.PicklistSchema<T, string>, typeof text>;
}

/** a message of `table`: checked, and read from protobuf, as its table says */
export function message<T extends Table>(table: T) {
  return {
    ...kind(objectCheck(table), v.object(entries(table, "wellFormed")), v.object(entries(table, "shape"))),
    table,
  } as ValueKind<v.ObjectSchema<Entries<T, "wellFormed">, undefined>, v.ObjectSchema<Entries<T, "shape">, undefined>>;
}

// -- fields

interface FieldOptions {
  proto: number;
  wire: Wire;
  presence: Presence;
}

/** an optional field: absent stays absent */
export function optional<W extends v.GenericSchema, S extends v.GenericSchema>(
  o: FieldOptions & { reading?: Reading },
  k: ValueKind<W, S>,
): Field<v.OptionalSchema<W, undefined>, v.OptionalSchema<S, undefined>> {
  return field(o, k, { wellFormed: v.optional(k.wellFormed), shape: v.optional(k.shape) }, o.reading);
}

/** an optional field whose absence reads as `def` */
export function defaulted<W extends v.GenericSchema, S extends v.GenericSchema, const D extends string>(
  o: FieldOptions & { default: D; reading?: Reading },
  k: ValueKind<W, S>,
): Field<v.OptionalSchema<W, D>, v.OptionalSchema<S, D>> {
  const entries = { wellFormed: v.optional(k.wellFormed, o.default as never), shape: v.optional(k.shape, o.default as never) };
  return { ...field(o, k, entries, o.reading), default: o.default } as never;
}

/** a field that must be there */
export function required<W extends v.GenericSchema, S extends v.GenericSchema>(o: FieldOptions, k: ValueKind<W, S>): Field<W, S> {
  return { ...field(o, k, { wellFormed: k.wellFormed, shape: k.shape }), required: true };
}

type List<T extends v.GenericSchema> = v.OptionalSchema<v.NullableSchema<v.ArraySchema<T, undefined>, undefined>, undefined>;
const list = <T extends v.GenericSchema>(item: T): List<T> => v.optional(v.nullable(v.array(item)));

/** a repeated field: optional, null or a list (objects.ts's `list`) */
export function repeated<W extends v.GenericSchema, S extends v.GenericSchema>(
  o: FieldOptions,
  k: ValueKind<W, S>,
): Field<List<W>, List<S>> {
  return { ...field(o, k, { wellFormed: list(k.wellFormed), shape: list(k.shape) }), repeated: true };
}

function field<W extends v.GenericSchema, S extends v.GenericSchema>(
  o: FieldOptions,
  k: ValueKind,
  schemas: { wellFormed: W; shape: S },
  reading?: Reading,
): Field<W, S> {
  const unknown =
    reading && k.values ? { known: new Set([...k.values, ...(reading.alsoKnown ?? [])]), reading: reading.reading } : undefined;
  return {
    proto: o.proto,
    wire: o.wire,
    presence: o.presence,
    repeated: false,
    required: false,
    default: undefined,
    kind: k,
    ...schemas,
    unknown,
  };
}

// -- what the tables make

export type Entries<T extends Table, K extends "wellFormed" | "shape"> = { [F in keyof T]: T[F][K] };

/** a table's valibot entries (v.object's), well-formed or shape, in the table's order */
export function entries<T extends Table, K extends "wellFormed" | "shape">(table: T, which: K): Entries<T, K> {
  const out: Record<string, unknown> = {};
  for (const name in table) out[name] = table[name][which];
  return out as Entries<T, K>;
}

/**
 * The hand-written check of a message (fast-check.ts's blocks): a key the
 * input holds is written (undefined too), an absent key is not, a default
 * fills in for absent and undefined, as valibot's v.object does, in the
 * table's order.
 */
export function objectCheck(table: Table): Parse<Obj> {
  const fields = Object.entries(table).map(([name, f]) => ({
    name,
    def: f.default,
    required: f.required,
    check: f.repeated ? nullable(listOf(f.kind.check)) : f.kind.check,
  }));
  return (x) => {
    if (!isObj(x)) return FAIL;
    const out: Obj = {};
    for (let i = 0; i < fields.length; i++) {
      const { name, def, required, check } = fields[i];
      if (def !== undefined || required) {
        const value = x[name] === undefined ? def : x[name];
        const checked = check(value);
        if (checked === FAIL) return FAIL;
        out[name] = checked;
      } else if (!opt(x, name, out, check)) return FAIL;
    }
    return out;
  };
}

/** the fields of `table` kube-proxy reads an unknown value of, with that reading */
export const enumReadings = (table: Table) => Object.entries(table).flatMap(([name, f]) => (f.unknown ? [{ name, ...f.unknown }] : []));

/** a field only the protobuf decoders read (its JSON shape is checked elsewhere, or nowhere) */
export const proto = (n: number, wire: Wire, presence: Presence = "omitempty", repeatedField = false): ProtoField => ({
  proto: n,
  wire,
  presence,
  repeated: repeatedField,
});

/** a message whose hand-written check is `check` (one that shares its outputs), read from protobuf by its table and then checked */
export function messageChecked<T extends Table>(table: T, check: Parse<unknown>) {
  const { wellFormed, shape } = message(table);
  return kind(check, wellFormed, shape);
}
