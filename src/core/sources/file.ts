// The file source: real Kubernetes objects (what `kubectl get
// services,endpointslices,nodes -A -o yaml` prints: a List, or several YAML
// or JSON documents) read from a file that is watched for edits.
// Objects are read as from an API server (objects.ts, read.ts): what an API
// server of any version would hold is taken, values read as kube-proxy reads
// them. What no API server would hold (an object, or one value of it) is an
// error at start-up (exit 2, naming the file, the object and the field) and,
// in a later edit, skipped with a WARN. A file that cannot be read, is not
// YAML/JSON, or holds no Kubernetes object at all (empty, a scalar, a list of
// numbers: the wrong file) is an error at start-up and, later, a logged error
// that keeps the last good state.

import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { parseAllDocuments, type Document } from "yaml";
import type { Brain } from "../brain/brain.ts";
import { errorMessage, invalid } from "../errors.ts";
import { kinds, objectName, parseObject, type DropReason, type K8sObject, type Kind } from "../brain/k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "../brain/model/endpoints.ts";
import type { Logger } from "../log.ts";
import { Ingest } from "./ingest.ts";
import { noteLine } from "./read-log.ts";
import { readTextFile } from "../read-text.ts";

export interface ParsedFile {
  objects: K8sObject[];
  /** one line per object skipped because no API server would hold it: `file: item i: service ns/name field: reason` */
  errors: string[];
  /** one line per value skipped because no API server would hold it (the rest of its object is read) */
  rejected: string[];
  /** one line per value read as kube-proxy reads it with a warning (unknown to this version), or object ignored (a slice whose service is not in the file) */
  warnings: string[];
  /** the objects refused, for kpng_objects_dropped_total; namespace and name when they have one (their last valid version stays) */
  dropped: Array<{ kind: Kind; reason: DropReason; namespace?: string; name?: string }>;
}

/** The documents of a YAML or JSON text, fast path first. */
function documents(path: string, text: string): unknown[] {
  try {
    // JSON.parse and Bun's native YAML parser are far faster than the `yaml`
    // library on a big dump (see docs/results/2026-11.md).
    const t = text.trimStart();
    if (t.startsWith("{")) return [JSON.parse(text)];
    const v = Bun.YAML.parse(text) as unknown;
    // Bun returns an array for a multi-document text; a top-level array is never a k8s object either.
    return Array.isArray(v) ? v : [v];
  } catch {
    // Parse again with the `yaml` library only to tell the operator where the error is.
    for (const doc of parseAllDocuments(text, { uniqueKeys: false }) as Document[]) {
      const err = doc.errors[0];
      if (!err) continue;
      const line = err.linePos?.[0]?.line;
      throw invalid(`${path}${line ? `:${line}` : ""}: not valid YAML or JSON: ${err.message.split("\n")[0]}`);
    }
    throw invalid(`${path}: not valid YAML or JSON`);
  }
}

/** a mapping with a `kind`: what kubectl prints for every object, whether kpng reads that kind or not */
const isKubeObject = (v: unknown) =>
  typeof v === "object" && v !== null && !Array.isArray(v) && typeof (v as { kind?: unknown }).kind === "string";

const typeName = (v: unknown) =>
  Array.isArray(v) ? "list" : v === null || v === undefined ? "null" : typeof v === "object" ? "mapping without a kind" : typeof v;

/** What a file without Kubernetes objects holds, for the one-line error: `a list of 3 numbers`. */
function describeValues(values: unknown[]): string {
  if (!values.length) return "it is empty";
  if (values.length === 1) {
    const v = values[0];
    const shown =
      typeof v === "string"
        ? ` (${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)})`
        : typeof v === "number" || typeof v === "boolean"
          ? ` (${v})`
          : "";
    return `it holds one ${typeName(v)}${shown}`;
  }
  const types = [...new Set(values.map(typeName))];
  return `it holds a list of ${values.length} ${types.length === 1 && !types[0].includes(" ") ? `${types[0]}s` : `items (${types.join(", ")})`}`;
}

/**
 * Parses file contents; throws a KpngError naming the file when it is not
 * YAML/JSON at all, or holds no Kubernetes object (an empty kubectl List is
 * an empty cluster, and fine).
 */
export function parseClusterFile(path: string, text: string): ParsedFile {
  const raws: unknown[] = [];
  let lists = 0;
  for (const value of documents(path, text)) {
    if (value === null || value === undefined) continue;
    const list = value as { kind?: unknown; items?: unknown };
    if (typeof list.kind === "string" && list.kind.endsWith("List") && Array.isArray(list.items)) {
      lists++;
      raws.push(...list.items);
    } else raws.push(value);
  }
  if (!raws.some(isKubeObject) && !(lists && !raws.length))
    throw invalid(`${path}: no Kubernetes object in the file: ${describeValues(raws)}`);
  const parsed: Array<{ i: number; object: K8sObject }> = [];
  const out: ParsedFile = { objects: [], errors: [], rejected: [], warnings: [], dropped: [] };
  raws.forEach((raw, i) => {
    const res = parseObject(raw);
    if (res.ok) {
      parsed.push({ i, object: res.object });
      for (const n of res.notes ?? []) (n.apiRejects ? out.rejected : out.warnings).push(`${path}: ${noteLine(res.object, n)}`);
    } else if ("error" in res) {
      out.errors.push(`${path}: item ${i}: ${res.error}`);
      const { kind, metadata: m } = (raw ?? {}) as { kind?: unknown; metadata?: { namespace?: unknown; name?: unknown } };
      if (!kinds.includes(kind as Kind)) return;
      const name = typeof m?.name === "string" && m.name ? m.name : undefined;
      const namespace = kind === "Node" ? "" : typeof m?.namespace === "string" && m.namespace ? m.namespace : "default";
      out.dropped.push({ kind: kind as Kind, reason: res.reason, ...(name ? { namespace, name } : {}) });
    }
  });
  // A file is a whole cluster: a slice whose service is not in it is a mistake
  // worth naming (from the API server it would just be an ordering race).
  const services = new Set(
    parsed.filter((p) => p.object.kind === "Service").map((p) => `${p.object.metadata.namespace}/${p.object.metadata.name}`),
  );
  for (const { i, object } of parsed) {
    const owner = object.kind === "EndpointSlice" ? object.metadata.labels?.[SERVICE_NAME_LABEL] : undefined;
    if (owner !== undefined && !services.has(`${object.metadata.namespace}/${owner}`)) {
      out.warnings.push(
        `${path}: item ${i}: ${objectName(object)} metadata.labels[${SERVICE_NAME_LABEL}]: service ${object.metadata.namespace}/${owner} is not in the file`,
      );
      continue;
    }
    out.objects.push(object);
  }
  return out;
}

export async function readClusterFile(path: string): Promise<ParsedFile> {
  return parseClusterFile(path, await readTextFile(path, "input file"));
}

export interface FileSource {
  /** re-read now (the watcher calls this; tests may too) */
  reload(): Promise<void>;
  close(): void;
}

/**
 * Loads the file into the brain (all kinds synced after the first read) and
 * watches it. The first read throws on an unreadable file; later reads log.
 */
export async function startFileSource(opts: { path: string; brain: Brain; log: Logger; watch?: boolean }): Promise<FileSource> {
  const { brain, log } = opts;
  const path = resolve(opts.path);
  const ingest = new Ingest(brain, { type: "at-once" });

  /** lines said at the last load: a line is said once, not at every re-read of the file */
  let said = new Set<string>();
  const load = (parsed: ParsedFile) => {
    const now = new Set<string>();
    const say = (lines: string[], msg: string, key: string) => {
      for (const line of lines) {
        now.add(line);
        if (!said.has(line)) log.warn(msg, { [key]: line });
      }
    };
    say(parsed.errors, "skipping invalid object", "error");
    say(parsed.rejected, "skipping a value no API server accepts", "error");
    say(parsed.warnings, "read as kube-proxy reads it", "warning");
    said = now;
    // A refused object keeps its last valid version, as from the API server: bad input tears nothing down.
    const kept: K8sObject[] = [];
    for (const d of parsed.dropped) {
      ingest.dropped(d.kind, d.reason);
      const last = d.name ? ingest.last(d.kind, d.namespace!, d.name) : undefined;
      if (last) kept.push(last);
    }
    const objects = kept.length ? [...parsed.objects, ...kept] : parsed.objects;
    for (const kind of kinds) {
      ingest.replace(
        kind,
        objects.filter((o) => o.kind === kind),
      );
      ingest.synced(kind);
    }
    ingest.changed();
  };
  // At start-up the file must hold nothing an API server would refuse: exit 2 naming the file, object and field.
  const first = await readClusterFile(opts.path);
  const refused = [...first.errors, ...first.rejected];
  if (refused.length) throw invalid(refused[0] + (refused.length > 1 ? ` (and ${refused.length - 1} more)` : ""));
  load(first);

  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> = Promise.resolve();
  // `settling`: a watch event can fire while an editor is still writing, so a
  // failed read then is retried once shortly before it counts as an error.
  const reload = (settling = false) =>
    (running = running.then(async () => {
      try {
        load(await readClusterFile(opts.path));
      } catch (err) {
        if (settling) timer = setTimeout(() => reload(false), 100);
        else log.error("input file not loaded, keeping the last good state", { error: errorMessage(err) });
      }
    }));

  let watcher: FSWatcher | undefined;
  if (opts.watch !== false) {
    // Watch the directory: editors replace files by rename, which ends a watch on the file itself.
    watcher = watch(dirname(path), (_event, name) => {
      if (name !== basename(path)) return;
      clearTimeout(timer);
      timer = setTimeout(() => reload(true), 1); // one read for the burst of events a write makes
    });
  }
  return {
    reload: () => reload(false),
    close: () => {
      clearTimeout(timer);
      watcher?.close();
    },
  };
}
