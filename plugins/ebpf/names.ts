// The eBPF backend's vocabulary: the maps and programs of bpf/kpng.bpf.c and
// where the loader pins them. A pin directory holds one kpng's whole state:
//
//   <pin dir>/kpng_front, kpng_group, ...   the maps
//   <pin dir>/link_connect4, ...            one bpf_link per hook (keeps it attached)
//   <pin dir>/obj_<hash>/                   an empty directory naming the object the links run

/** the default pin directory (a bpffs; mounted there if /sys/fs/bpf is not one) */
export const DEFAULT_PIN_DIR = "/sys/fs/bpf/kpng";
export const DEFAULT_BPFFS = "/sys/fs/bpf";

/** Maps the backend writes (the LRU maps are the programs' own). */
export const MAP = {
  /** (addr, port, proto, family) -> group id */
  front: "kpng_front",
  /** group id -> count, affinity, flags */
  group: "kpng_group",
  /** (group id, slot) -> endpoint */
  backend: "kpng_backend",
} as const;

/** every map, pinned and removed by --cleanup */
export const ALL_MAPS = [MAP.front, MAP.group, MAP.backend, "kpng_affinity", "kpng_flow", "kpng_revnat"] as const;

export type MapName = (typeof MAP)[keyof typeof MAP];

/** the programs, one per cgroup sock_addr hook (the program's section names the hook) */
export const HOOKS = ["connect4", "connect6", "sendmsg4", "sendmsg6", "recvmsg4", "recvmsg6", "getpeername4", "getpeername6"] as const;

export const programName = (hook: string) => `kpng_${hook}`;
export const linkPin = (dir: string, hook: string) => `${dir}/link_${hook}`;
export const mapPin = (dir: string, map: string) => `${dir}/${map}`;
/** the marker of the object whose programs the links run */
export const objectMarker = (dir: string, hash: string) => `${dir}/obj_${hash}`;
export const OBJECT_MARKER_PREFIX = "obj_";

/** group flag: refuse with EPERM (kube-proxy drops: a Local policy without endpoints) rather than ECONNREFUSED */
export const GROUP_DROP = 1;
