// The few libbpf calls kpng makes, through bun:ffi. libbpf (Debian's
// libbpf1) parses the ELF object, creates or reuses the pinned maps, loads
// the programs and attaches them; iproute2, which every kpng node already
// has, depends on it. Every call here returns a negative errno on failure
// (libbpf 1.0 semantics); `check` turns one into an Error naming the call.

import { dlopen, ptr, type Pointer } from "bun:ffi";
import { KpngError } from "../../src/host/toolkit/index.ts";

const SYMBOLS = {
  libbpf_get_error: { args: ["ptr"], returns: "i64" },
  libbpf_strerror: { args: ["i32", "ptr", "u64"], returns: "i32" },
  bpf_object__open_mem: { args: ["ptr", "u64", "ptr"], returns: "ptr" },
  bpf_object__load: { args: ["ptr"], returns: "i32" },
  bpf_object__close: { args: ["ptr"], returns: "void" },
  bpf_object__find_map_by_name: { args: ["ptr", "cstring"], returns: "ptr" },
  bpf_object__find_program_by_name: { args: ["ptr", "cstring"], returns: "ptr" },
  bpf_map__set_pin_path: { args: ["ptr", "cstring"], returns: "i32" },
  bpf_map__fd: { args: ["ptr"], returns: "i32" },
  bpf_program__attach_cgroup: { args: ["ptr", "i32"], returns: "ptr" },
  bpf_link__pin: { args: ["ptr", "cstring"], returns: "i32" },
  bpf_link__open: { args: ["cstring"], returns: "ptr" },
  bpf_link__update_program: { args: ["ptr", "ptr"], returns: "i32" },
  bpf_link__destroy: { args: ["ptr"], returns: "i32" },
  bpf_obj_get: { args: ["cstring"], returns: "i32" },
  bpf_map_update_batch: { args: ["i32", "ptr", "ptr", "ptr", "ptr"], returns: "i32" },
  bpf_map_delete_batch: { args: ["i32", "ptr", "ptr", "ptr"], returns: "i32" },
  bpf_map_lookup_batch: { args: ["i32", "ptr", "ptr", "ptr", "ptr", "ptr", "ptr"], returns: "i32" },
  bpf_map_update_elem: { args: ["i32", "ptr", "ptr", "u64"], returns: "i32" },
  bpf_map_delete_elem: { args: ["i32", "ptr"], returns: "i32" },
  bpf_map_lookup_elem: { args: ["i32", "ptr", "ptr"], returns: "i32" },
  bpf_map_get_next_key: { args: ["i32", "ptr", "ptr"], returns: "i32" },
} as const;

type Lib = ReturnType<typeof dlopen<typeof SYMBOLS>>["symbols"];

let lib: Lib | undefined;

/** libbpf's symbols; a node without libbpf.so.1 gets one line naming the package */
export function libbpf(): Lib {
  if (lib) return lib;
  try {
    lib = dlopen("libbpf.so.1", SYMBOLS).symbols;
  } catch (err) {
    throw new KpngError(
      "unavailable",
      `ebpf backend: cannot load libbpf.so.1 (Debian/Ubuntu package libbpf1): ${err instanceof Error ? err.message : err}`,
    );
  }
  return lib;
}

export const ENOENT = 2;

/** libbpf's text for a negative error code */
export function strerror(code: number): string {
  const buf = new Uint8Array(256);
  libbpf().libbpf_strerror(code, ptr(buf), buf.length);
  const end = buf.indexOf(0);
  return new TextDecoder().decode(buf.subarray(0, end < 0 ? buf.length : end));
}

export class BpfError extends Error {
  override readonly name = "BpfError";
  constructor(
    readonly call: string,
    /** negative errno */
    readonly code: number,
  ) {
    super(`${call}: ${strerror(code)}`);
  }
}

/** `rc` if not negative, else throws naming `call` */
export function check(call: string, rc: number): number {
  if (rc < 0) throw new BpfError(call, rc);
  return rc;
}

/** a pointer libbpf returned, else throws naming `call` with libbpf's error for it */
export function checkPtr(call: string, p: Pointer | bigint | null): Pointer {
  if (p === null || p === 0 || p === 0n) throw new BpfError(call, Number(libbpf().libbpf_get_error(null)) || -1);
  return p as Pointer;
}

/** a NUL-terminated copy of `s` for a `cstring` argument */
export const cstr = (s: string) => Buffer.from(`${s}\0`);
