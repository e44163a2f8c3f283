// The executor: writes planned map ops into the pinned maps, one batch
// syscall per run of ops of one kind on one map, and reads the maps back
// (a new process's first full sync diffs against what the kernel holds).
// Tests use a recorder with the same interface.

import { ptr } from "bun:ffi";
import { BpfError, ENOENT, check, libbpf } from "./libbpf.ts";
import type { MapFds } from "./attach.ts";
import { backendOf, encodeOp, frontKeyOf, groupOf, SIZES, type BackendValue, type FrontKey, type GroupValue, type MapOp } from "./maps.ts";
import { MAP, type MapName } from "./names.ts";

/** what the three maps hold */
export interface MapContents {
  front: Array<{ key: FrontKey; group: number }>;
  group: Map<number, GroupValue>;
  backend: Array<{ id: number; slot: number; value: BackendValue }>;
}

export interface MapWriter {
  apply(ops: readonly MapOp[]): Promise<void>;
  dump(): Promise<MapContents>;
}

/** runs of consecutive ops on the same map with the same verb */
export function runsOf(ops: readonly MapOp[]): MapOp[][] {
  const out: MapOp[][] = [];
  for (const op of ops) {
    const last = out.at(-1);
    if (last && last[0].map === op.map && last[0].op === op.op) last.push(op);
    else out.push([op]);
  }
  return out;
}

export function kernelWriter(fds: MapFds): MapWriter {
  const lib = libbpf();
  const apply = (run: MapOp[]) => {
    const { map, op } = run[0];
    const { key, value } = SIZES[map];
    const keys = new Uint8Array(key * run.length);
    const values = new Uint8Array(value * run.length);
    run.forEach((o, i) => encodeOp(o, keys, values, i));
    const count = new Uint32Array([run.length]);
    const fd = fds[map];
    if (op === "update") {
      check(`update ${map} (${run.length})`, lib.bpf_map_update_batch(fd, ptr(keys), ptr(values), ptr(count), null));
      return;
    }
    const rc = lib.bpf_map_delete_batch(fd, ptr(keys), ptr(count), null);
    if (rc === 0) return;
    // A batch delete stops at the first missing key: finish one by one, a missing key being already gone.
    if (rc !== -ENOENT) throw new BpfError(`delete ${map} (${run.length})`, rc);
    for (let i = count[0]; i < run.length; i++) {
      const r = lib.bpf_map_delete_elem(fd, ptr(keys.subarray(i * key)));
      if (r < 0 && r !== -ENOENT) throw new BpfError(`delete ${map}`, r);
    }
  };
  return {
    async apply(ops) {
      for (const run of runsOf(ops)) apply(run);
    },
    async dump() {
      const front: MapContents["front"] = [];
      readAll(fds[MAP.front], MAP.front, (k, v, i) => front.push({ key: frontKeyOf(k, i * 20), group: v.getUint32(i * 4, true) }));
      const group = new Map<number, GroupValue>();
      readAll(fds[MAP.group], MAP.group, (k, v, i) =>
        group.set(new DataView(k.buffer).getUint32(i * 4, true), groupOf(new Uint8Array(v.buffer), i * 12)),
      );
      const backend: MapContents["backend"] = [];
      readAll(fds[MAP.backend], MAP.backend, (k, v, i) => {
        const d = new DataView(k.buffer);
        backend.push({
          id: d.getUint32(i * 8, true),
          slot: d.getUint32(i * 8 + 4, true),
          value: backendOf(new Uint8Array(v.buffer), i * 20),
        });
      });
      return { front, group, backend };
    },
  };
}

/** entries read per lookup_batch call */
const CHUNK = 4096;

/** Every entry of a map, read in batches (one syscall per CHUNK entries): `each(keys, values, i)` decodes entry i of the chunk. */
function readAll(fd: number, map: MapName, each: (keys: Uint8Array, values: DataView, i: number) => void) {
  const lib = libbpf();
  const { key, value } = SIZES[map];
  // the batch position: a bucket index for hash maps (a u32), a key elsewhere
  const inBatch = new Uint8Array(Math.max(key, 8));
  const outBatch = new Uint8Array(Math.max(key, 8));
  const keys = new Uint8Array(key * CHUNK);
  const values = new Uint8Array(value * CHUNK);
  const view = new DataView(values.buffer);
  const count = new Uint32Array(1);
  for (let first = true; ; first = false) {
    count[0] = CHUNK;
    const rc = lib.bpf_map_lookup_batch(fd, first ? null : ptr(inBatch), ptr(outBatch), ptr(keys), ptr(values), ptr(count), null);
    if (rc < 0 && rc !== -ENOENT) throw new BpfError(`read ${map}`, rc);
    for (let i = 0; i < count[0]; i++) each(keys, view, i);
    // -ENOENT: the last entries came with this call
    if (rc === -ENOENT) return;
    inBatch.set(outBatch);
  }
}
