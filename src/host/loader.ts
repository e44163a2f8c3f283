// Resolves `--backend NAME` (built-ins, lazily imported) and `--plugin PATH`
// (a .ts/.js file imported at run time, also from the compiled binary) to
// Backend instances, checking that a plugin really is one.

import { stat } from "node:fs/promises";
import { extname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import * as v from "valibot";
import { errorMessage, invalid, KpngError } from "../core/errors.ts";
import type { Backend, BackendContext, BackendFactory, PluginSchemas } from "./backend.ts";
import { builtinBackend } from "./registry.ts";
import * as toolkit from "./toolkit/index.ts";

/** the toolkit as `ctx.toolkit`: its module's functions, and the generated schemas a plugin may still read (PluginSchemas) */
const contextToolkit = Object.defineProperties(
  { ...toolkit },
  {
    // require, not import: read synchronously, and the generated file evaluated only when a plugin reads one
    ServiceSchema: { enumerable: true, get: () => generated().ServiceSchema },
    EndpointSchema: { enumerable: true, get: () => generated().EndpointSchema },
  },
) as typeof toolkit & PluginSchemas;
const generated = () => require("../gen/localv1/services_pb.ts") as PluginSchemas;

/** What a plugin's Backend must look like; built only when a plugin is loaded (a node's start never builds it). */
function backendShape() {
  const fn = v.custom<(...a: unknown[]) => unknown>((x) => typeof x === "function", "must be a function");
  const optionalFn = v.optional(fn);
  const base = {
    name: v.pipe(v.string("must be a string"), v.minLength(1, "must not be empty")),
    setup: optionalFn,
    cleanup: optionalFn,
    close: optionalFn,
  };
  return v.variant(
    "kind",
    [
      v.looseObject({ kind: v.literal("full"), apply: fn, ...base }),
      v.looseObject({
        kind: v.literal("incremental"),
        setService: fn,
        deleteService: fn,
        setEndpoint: fn,
        deleteEndpoint: fn,
        sync: fn,
        ...base,
      }),
    ],
    'must be "full" or "incremental"',
  );
}
let BackendShape: ReturnType<typeof backendShape> | undefined;

/** Checks a value claimed to be a Backend; `what` names it in the error. */
export function checkBackend(value: unknown, what: string): Backend {
  if (typeof value !== "object" || value === null) {
    throw invalid(
      `${what}: not a kpng Backend: got ${value === null ? "null" : typeof value}, want a BackendFactory function or a Backend object`,
    );
  }
  BackendShape ??= backendShape();
  const res = v.safeParse(BackendShape, value);
  if (res.success) return value as Backend;
  const issue = res.issues[0];
  const field = issue.path?.map((p) => String(p.key)).join(".") ?? "kind";
  const why = issue.input === undefined && field !== "kind" ? "is missing" : issue.message;
  throw invalid(`${what}: not a kpng Backend: ${field} ${why}`);
}

const PLUGIN_EXTENSIONS = [".ts", ".mts", ".js", ".mjs"];

async function importPlugin(path: string): Promise<unknown> {
  const abs = resolve(path);
  if (!PLUGIN_EXTENSIONS.includes(extname(abs))) throw invalid(`plugin ${path}: must be a ${PLUGIN_EXTENSIONS.join("/")} file`);
  const st = await stat(abs).catch(() => null);
  if (!st?.isFile()) throw invalid(`plugin ${path}: no such file`);
  try {
    return (await import(pathToFileURL(abs).href)) as unknown;
  } catch (err) {
    throw invalid(`plugin ${path}: cannot load: ${errorMessage(err).split("\n")[0]}`);
  }
}

/**
 * A plugin default-exports a BackendFactory (or a Backend object, accepted
 * for convenience). Plugins are loaded by the compiled binary too, so they
 * import kpng's types only (`import type`): everything else arrives as
 * arguments, the toolkit's functions as `ctx.toolkit`.
 */
export async function loadBackend(spec: { builtin?: string; plugin?: string }, ctx: BackendContext): Promise<Backend> {
  let what: string;
  let exported: unknown;
  if (spec.builtin !== undefined) {
    const load = builtinBackend(spec.builtin);
    what = `backend ${spec.builtin}`;
    exported = (await load()).default;
  } else {
    what = `plugin ${spec.plugin}`;
    const mod = (await importPlugin(spec.plugin!)) as { default?: unknown };
    exported = mod.default;
    if (exported === undefined) throw invalid(`${what}: has no default export (export default a BackendFactory)`);
  }
  let made: unknown = exported;
  // set on the caller's context, not a copy: fields set later (metrics) must reach the backend
  ctx.toolkit ??= contextToolkit;
  if (typeof exported === "function") {
    try {
      made = await (exported as BackendFactory)(ctx);
    } catch (err) {
      if (err instanceof KpngError) throw err;
      throw invalid(`${what}: its BackendFactory failed: ${errorMessage(err).split("\n")[0]}`);
    }
  }
  // A built-in is typed a Backend (`satisfies Backend`): only what comes from outside is checked, at this boundary.
  return spec.builtin !== undefined ? (made as Backend) : checkBackend(made, what);
}

/** Every backend asked for, built-ins first, in order: one that cannot load stops start-up. */
export async function loadBackends(
  asked: { builtins: readonly string[]; plugins: readonly string[] },
  ctx: BackendContext,
): Promise<Backend[]> {
  const specs = [...asked.builtins.map((builtin) => ({ builtin })), ...asked.plugins.map((plugin) => ({ plugin }))];
  const backends: Backend[] = [];
  for (const spec of specs) backends.push(await loadBackend(spec, ctx));
  return backends;
}
