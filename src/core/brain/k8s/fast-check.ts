// Building blocks for the hand-written copies of objects.ts's schemas
// (fast-slice.ts, fast-service.ts): a start-up lists 10,000s of Services and
// EndpointSlices, and valibot's generic walk over them (megamorphic `~run`
// calls, cold at start-up) costs several times straight code. Each block
// mirrors one valibot construct, output included: a key the input holds is
// written (undefined too), an absent key is not, defaults fill in as
// valibot's do. A check says only yes or no: on no, valibot runs next and
// names the field and the why.

export type Obj = Record<string, unknown>;
/** what `v.object` and `v.record` accept: any non-null object (arrays too) */
export const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null;
export const FAIL = Symbol("invalid");
export type Out<T> = T | typeof FAIL;
/** one schema: the value's output, or FAIL */
export type Parse<T> = (x: unknown) => Out<T>;

/** v.optional(v.string()) */
export function optString(o: Obj, key: string, out: Obj): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x !== undefined && typeof x !== "string") return false;
  out[key] = x;
  return true;
}

/** v.optional(inner) without a default: absent stays absent, undefined is kept, anything else through `parse` */
export function opt(o: Obj, key: string, out: Obj, parse: Parse<unknown>): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x === undefined) {
    out[key] = x;
    return true;
  }
  const parsed = parse(x);
  if (parsed === FAIL) return false;
  out[key] = parsed;
  return true;
}

/** v.nullable(inner) */
export const nullable =
  <T>(inner: Parse<T>): Parse<T | null> =>
  (x) =>
    x === null ? null : inner(x);

/**
 * The output of an object with nothing kept in it (`status: {loadBalancer:
 * {}}` on every ClusterIP Service): one shared, frozen object instead of one
 * each (an empty object is a 64-byte cell; the brain keeps every Service).
 */
export const EMPTY: Readonly<Obj> = Object.freeze({});

/** v.object({ [key]: v.optional(inner) }): objects of one optional field; empty, or holding only EMPTY, they are shared */
export const objectWith = (key: string, inner: Parse<unknown>): Parse<Obj> => {
  const holdingEmpty: Obj = Object.freeze({ [key]: EMPTY });
  return (x) => {
    if (!isObj(x)) return FAIL;
    if (!(key in x)) return EMPTY;
    const out: Obj = {};
    if (!opt(x, key, out, inner)) return FAIL;
    return out[key] === EMPTY ? holdingEmpty : out;
  };
};

/** v.array(item), built by push (JSC keeps such arrays dense) */
export const listOf =
  <T>(item: Parse<T>): Parse<T[]> =>
  (x) => {
    if (!Array.isArray(x)) return FAIL;
    const list: T[] = [];
    for (let i = 0; i < x.length; i++) {
      const r = item(x[i]);
      if (r === FAIL) return FAIL;
      list.push(r);
    }
    return list;
  };

/** v.picklist(options) */
export const oneOf = (options: readonly string[]): Parse<string> => {
  const set = new Set(options);
  return (x) => (typeof x === "string" && set.has(x) ? x : FAIL);
};

/** v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max)) */
export const intIn =
  (min: number, max: number): Parse<number> =>
  (x) =>
    typeof x === "number" && Number.isInteger(x) && x >= min && x <= max ? x : FAIL;

/** v.pipe(v.string(), v.check(ok)) */
export const stringWhere =
  (ok: (s: string) => boolean): Parse<string> =>
  (x) =>
    typeof x === "string" && ok(x) ? x : FAIL;

/** v.record(v.string(), v.string()) */
export function stringMap(x: unknown): Out<Record<string, string>> {
  if (!isObj(x)) return FAIL;
  const m: Record<string, string> = {};
  for (const k in x) {
    if (!Object.hasOwn(x, k) || k === "__proto__" || k === "prototype" || k === "constructor") continue;
    const val = x[k];
    if (typeof val !== "string") return FAIL;
    m[k] = val;
  }
  return m;
}

const labels = nullable(stringMap);

/** objects.ts's `metadata` */
export function metadata(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const name = x.name;
  if (typeof name !== "string" || name.length < 1) return FAIL;
  const out: Obj = { name };
  if (!optString(x, "namespace", out) || !opt(x, "labels", out, labels) || !opt(x, "annotations", out, labels)) return FAIL;
  return out;
}

/** objects.ts's `protocol`: v.optional(picklist, "TCP"), so absent and undefined give TCP */
export function protocol(x: unknown): Out<string> {
  const p = x === undefined ? "TCP" : x;
  return p === "TCP" || p === "UDP" || p === "SCTP" ? p : FAIL;
}

/** objects.ts's `port` */
export const port = intIn(1, 65535);
