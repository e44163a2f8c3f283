// Loads kpng's BPF object, pins its maps and attaches its programs to a
// cgroup v2 directory, each through a pinned bpf_link: the hooks stay
// attached and the maps keep their entries while no kpng process runs
// (`kill -9`, an upgrade). A new process finding every link pinned, running
// the programs of its own object (a marker directory names the object's
// hash), loads nothing: it opens the pinned maps and rewrites them in place.
// A kpng with another object (an upgrade) loads it over the pinned maps and
// swaps each link's program atomically (BPF_LINK_UPDATE): the hooks are never
// detached. `detach` (--cleanup) unpins the links, which detaches the
// programs, and the maps.
//
// Checks first what the node lacks (the bpf() syscall, cgroup v2, bpffs),
// each failure one line naming it.

import { existsSync, mkdirSync, openSync, closeSync, readFileSync, readdirSync, rmdirSync, unlinkSync } from "node:fs";
import { ptr } from "bun:ffi";
import { KpngError } from "../../src/host/toolkit/index.ts";
import { BpfError, check, checkPtr, cstr, libbpf } from "./libbpf.ts";
import { ALL_MAPS, HOOKS, MAP, OBJECT_MARKER_PREFIX, linkPin, mapPin, objectMarker, programName, type MapName } from "./names.ts";

export type MapFds = Record<MapName, number>;

const unavailable = (what: string) => new KpngError("unavailable", `ebpf backend: ${what}`);

/** the mount points of file systems of `type` in /proc/self/mountinfo */
export function mountsOf(type: string, mountinfo = readFileSync("/proc/self/mountinfo", "utf8")): string[] {
  const out: string[] = [];
  for (const line of mountinfo.split("\n")) {
    const [pre, post] = line.split(" - ");
    if (post?.split(" ")[0] === type) out.push(pre.split(" ")[4]);
  }
  return out;
}

/** Whether `dir` is a directory of a cgroup v2 hierarchy (cgroup.controllers exists only there). */
const isCgroup2 = (dir: string) => existsSync(`${dir}/cgroup.controllers`);

/**
 * The cgroup to attach to: `flag` when given (must be cgroup v2), else the
 * root of the node's cgroup v2 hierarchy, mounted at /run/kpng/cgroup2 when
 * the node has none mounted (a v1-only node).
 */
export function resolveCgroup(flag: string | undefined, mount: (type: string, dir: string) => void): string {
  if (flag !== undefined) {
    if (!existsSync(flag)) throw unavailable(`--ebpf-cgroup ${flag}: no such directory`);
    if (!isCgroup2(flag)) throw unavailable(`--ebpf-cgroup ${flag}: not a cgroup v2 directory (no cgroup.controllers)`);
    return flag;
  }
  const root = mountsOf("cgroup2")[0];
  if (root) return root;
  const dir = "/run/kpng/cgroup2";
  mkdirSync(dir, { recursive: true });
  mount("cgroup2", dir);
  if (!isCgroup2(dir)) throw unavailable("the kernel has no cgroup v2 (mounting cgroup2 failed)");
  return dir;
}

/** makes sure `pinDir` is (inside) a mounted bpffs, mounting `bpffs` there when it is not */
export function ensureBpffs(pinDir: string, bpffs: string, mount: (type: string, dir: string) => void) {
  const mounted = mountsOf("bpf");
  if (!mounted.some((m) => pinDir === m || pinDir.startsWith(`${m}/`))) {
    if (!pinDir.startsWith(`${bpffs}/`)) throw unavailable(`pin directory ${pinDir} is not on a bpf file system`);
    mkdirSync(bpffs, { recursive: true });
    mount("bpf", bpffs);
  }
  mkdirSync(pinDir, { recursive: true });
}

export interface AttachOptions {
  /** the ELF object (gen/object.ts) */
  object: Uint8Array;
  pinDir: string;
  cgroup: string;
}

/**
 * whether every hook's link is pinned, running the programs of the object
 * with `hash`, and every map is pinned: a map whose pin someone removed is
 * made again by loading (load() swaps the programs that use the new map into
 * the links); the links alone were checked once, and the repair of a removed
 * map pin then failed (kpng_front: bpf_obj_get) or left it unpinned.
 */
export const attached = (pinDir: string, hash: string) =>
  existsSync(objectMarker(pinDir, hash)) &&
  HOOKS.every((h) => existsSync(linkPin(pinDir, h))) &&
  ALL_MAPS.every((m) => existsSync(mapPin(pinDir, m)));

export const objectHash = (object: Uint8Array) => new Bun.CryptoHasher("sha256").update(object).digest("hex").slice(0, 16);

/**
 * Attaches (once) and opens the maps. Programs are loaded only when some
 * hook's link is missing; the maps are always the pinned ones when pinned.
 */
export function attach(opts: AttachOptions): { fds: MapFds; loaded: boolean } {
  const lib = libbpf();
  const hash = objectHash(opts.object);
  const loaded = !attached(opts.pinDir, hash);
  if (loaded) {
    load(opts);
    // the marker goes last: a crash before it makes the next start load again
    for (const m of readdirSync(opts.pinDir)) if (m.startsWith(OBJECT_MARKER_PREFIX)) rmdirSync(`${opts.pinDir}/${m}`);
    mkdirSync(objectMarker(opts.pinDir, hash));
  }
  const fds = {} as MapFds;
  for (const m of Object.values(MAP))
    fds[m] = check(`bpf_obj_get ${mapPin(opts.pinDir, m)}`, lib.bpf_obj_get(cstr(mapPin(opts.pinDir, m))));
  return { fds, loaded };
}

function load({ object, pinDir, cgroup }: AttachOptions) {
  const lib = libbpf();
  const obj = checkPtr("bpf_object__open_mem", lib.bpf_object__open_mem(ptr(object), object.length, null));
  let cgfd = -1;
  try {
    // pinned maps are reused by libbpf, so a hook re-attached after a crash shares the live maps
    for (const m of ALL_MAPS) {
      const map = checkPtr(`map ${m}`, lib.bpf_object__find_map_by_name(obj, cstr(m)));
      check(`bpf_map__set_pin_path ${m}`, lib.bpf_map__set_pin_path(map, cstr(mapPin(pinDir, m))));
    }
    const rc = lib.bpf_object__load(obj);
    if (rc < 0) throw loadError(rc);
    cgfd = openSync(cgroup, "r");
    for (const hook of HOOKS) {
      const prog = checkPtr(`program ${programName(hook)}`, lib.bpf_object__find_program_by_name(obj, cstr(programName(hook))));
      if (existsSync(linkPin(pinDir, hook))) {
        // attached by another object (an upgrade, or a crash mid-attach): swap the program in place
        const link = checkPtr(`open ${linkPin(pinDir, hook)}`, lib.bpf_link__open(cstr(linkPin(pinDir, hook))));
        try {
          check(`update ${linkPin(pinDir, hook)}`, lib.bpf_link__update_program(link, prog));
        } finally {
          lib.bpf_link__destroy(link); // closes our fd only: the pin keeps the link
        }
        continue;
      }
      const link = checkPtr(`attach ${hook} to ${cgroup}`, lib.bpf_program__attach_cgroup(prog, cgfd));
      try {
        check(`pin ${linkPin(pinDir, hook)}`, lib.bpf_link__pin(link, cstr(linkPin(pinDir, hook))));
      } finally {
        lib.bpf_link__destroy(link); // the pin holds the attachment now (or, unpinned, it goes away)
      }
    }
  } finally {
    if (cgfd >= 0) closeSync(cgfd);
    lib.bpf_object__close(obj);
  }
}

function loadError(rc: number): Error {
  const e = new BpfError("bpf_object__load", rc);
  if (rc === -38) return unavailable("the kernel has no bpf() system call (CONFIG_BPF_SYSCALL)");
  if (rc === -1 || rc === -13)
    return unavailable(`loading the BPF programs was refused (${e.message}): kpng needs root (CAP_BPF, CAP_NET_ADMIN)`);
  // libbpf refuses a pinned map whose definition differs from the object's
  if (rc === -22)
    return unavailable(
      `loading the BPF programs failed (${e.message}): pinned maps of an older layout? run kpng --cleanup --backend ebpf first`,
    );
  return unavailable(`loading the BPF programs failed: ${e.message}`);
}

/** --cleanup: unpins the links (detaching the programs) and the maps, and removes the pin directory; what is absent is skipped */
export function detach(pinDir: string): string[] {
  const removed: string[] = [];
  for (const p of [...HOOKS.map((h) => linkPin(pinDir, h)), ...ALL_MAPS.map((m) => mapPin(pinDir, m))]) {
    if (!existsSync(p)) continue;
    unlinkSync(p);
    removed.push(p);
  }
  if (existsSync(pinDir)) for (const m of readdirSync(pinDir)) if (m.startsWith(OBJECT_MARKER_PREFIX)) rmdirSync(`${pinDir}/${m}`);
  if (existsSync(pinDir) && readdirSync(pinDir).length === 0) rmdirSync(pinDir);
  return removed;
}
