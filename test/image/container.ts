// kpng's image run as Kubernetes runs the DaemonSet's pod: unpacked by umoci,
// started by runc with the container's network being a "host" network
// namespace (hostNetwork: true) and the rights of `privileged: true`. The
// "host" is always a namespace the test made (test/harness/netns.ts):
// runc joins it by path, /var/run/netns/NAME, and never sees the machine's
// own network.

import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startKpng, type KpngProcess } from "../harness/kpng-process.ts";
import { run } from "../harness/netns.ts";

/** The part of an OCI runtime config.json this file reads or writes. */
export interface RuntimeConfig {
  process: { args: string[]; env: string[]; terminal?: boolean; noNewPrivileges?: boolean; capabilities?: Record<string, string[]> };
  mounts: Array<{ destination: string; type?: string; source?: string; options?: string[] }>;
  linux: {
    namespaces: Array<{ type: string; path?: string }>;
    maskedPaths?: string[];
    readonlyPaths?: string[];
    seccomp?: unknown;
    resources?: { devices?: unknown[]; memory?: { limit?: number } };
    cgroupsPath?: string;
  };
  [k: string]: unknown;
}

export interface Mount {
  /** a file or directory on the machine */
  source: string;
  /** where the container sees it */
  destination: string;
  readonly?: boolean;
}

export interface PodSpec {
  /** the network namespace (ip netns name) that plays the node's host network */
  netns: string;
  /** arguments after the image's entrypoint (the DaemonSet's `args`) */
  args: string[];
  env?: Record<string, string>;
  /** the pod's volumes, as bind mounts */
  mounts?: Mount[];
  /** the container's cgroup (runc's cgroupsPath), e.g. to read its memory use */
  cgroup?: string;
  /** the container's memory limit in bytes (resources.limits.memory) */
  memoryLimit?: number;
  /** the capabilities granted (runPod: heldCapabilities()) */
  capabilities?: string[];
}

// Linux 6.x's capabilities, by bit number.
const CAPS = [
  "CHOWN",
  "DAC_OVERRIDE",
  "DAC_READ_SEARCH",
  "FOWNER",
  "FSETID",
  "KILL",
  "SETGID",
  "SETUID",
  "SETPCAP",
  "LINUX_IMMUTABLE",
  "NET_BIND_SERVICE",
  "NET_BROADCAST",
  "NET_ADMIN",
  "NET_RAW",
  "IPC_LOCK",
  "IPC_OWNER",
  "SYS_MODULE",
  "SYS_RAWIO",
  "SYS_CHROOT",
  "SYS_PTRACE",
  "SYS_PACCT",
  "SYS_ADMIN",
  "SYS_BOOT",
  "SYS_NICE",
  "SYS_RESOURCE",
  "SYS_TIME",
  "SYS_TTY_CONFIG",
  "MKNOD",
  "LEASE",
  "AUDIT_WRITE",
  "AUDIT_CONTROL",
  "SETFCAP",
  "MAC_OVERRIDE",
  "MAC_ADMIN",
  "SYSLOG",
  "WAKE_ALARM",
  "BLOCK_SUSPEND",
  "AUDIT_READ",
  "PERFMON",
  "BPF",
  "CHECKPOINT_RESTORE",
].map((c) => `CAP_${c}`);

/**
 * What `privileged: true` grants: every capability the runtime holds itself
 * (containerd does the same), read from this process's bounding set.
 */
export function heldCapabilities(status = readFileSync("/proc/self/status", "utf8")): string[] {
  const mask = BigInt(`0x${/^CapBnd:\s+([0-9a-f]+)$/m.exec(status)![1]}`);
  return CAPS.filter((_, bit) => (mask >> BigInt(bit)) & 1n);
}

/**
 * The runtime config of a privileged, host-network container, from the one
 * umoci wrote for the image (its entrypoint, env and mounts). Pure.
 */
export function podRuntimeConfig(base: RuntimeConfig, spec: PodSpec): RuntimeConfig {
  const c = structuredClone(base);
  c.process.args = [...c.process.args.slice(0, 1), ...spec.args];
  c.process.env = [...c.process.env.filter((e) => !e.startsWith("TERM=")), ...Object.entries(spec.env ?? {}).map(([k, v]) => `${k}=${v}`)];
  c.process.terminal = false;
  c.process.noNewPrivileges = false;
  c.process.capabilities = Object.fromEntries(
    ["bounding", "effective", "inheritable", "permitted", "ambient"].map((k) => [k, [...(spec.capabilities ?? [])]]),
  );
  c.linux.namespaces = c.linux.namespaces.map((n) =>
    n.type === "network" ? { type: "network", path: `/var/run/netns/${spec.netns}` } : n,
  );
  // privileged: nothing masked or read-only, every device, no seccomp
  c.linux.maskedPaths = [];
  c.linux.readonlyPaths = [];
  delete c.linux.seccomp;
  c.linux.resources = {
    ...c.linux.resources,
    devices: [{ allow: true, access: "rwm" }],
    ...(spec.memoryLimit ? { memory: { limit: spec.memoryLimit } } : {}),
  };
  if (spec.cgroup) c.linux.cgroupsPath = spec.cgroup;
  c.mounts = c.mounts.map((m) =>
    m.destination === "/sys" || m.destination === "/sys/fs/cgroup"
      ? { ...m, options: (m.options ?? []).filter((o) => o !== "ro").concat("rw") }
      : m,
  );
  for (const m of spec.mounts ?? []) {
    c.mounts.push({ destination: m.destination, type: "bind", source: m.source, options: ["rbind", m.readonly ? "ro" : "rw"] });
  }
  return c;
}

/** `umoci unpack` of image `layout:tag` into `bundle` (config.json + rootfs/); returns umoci's runtime config. */
export async function unpackImage(layout: string, tag: string, bundle: string): Promise<RuntimeConfig> {
  await run(["umoci", "unpack", "--image", `${layout}:${tag}`, bundle]);
  return JSON.parse(readFileSync(join(bundle, "config.json"), "utf8")) as RuntimeConfig;
}

export interface Root {
  /** the container's root: the image's files, writes kept apart */
  readonly path: string;
  remove(): Promise<void>;
}

let seq = 0;
const nextId = () => `kpng-test-${process.pid}-${++seq}`;

// A crashed or interrupted suite must not leave containers running (in
// namespaces the harness deletes) or roots mounted.
const live = new Map<string, string>();
process.on("exit", () => {
  for (const [id, root] of live) {
    Bun.spawnSync(["runc", "delete", "--force", id], { stderr: "ignore" });
    Bun.spawnSync(["umount", "-l", root], { stderr: "ignore" });
  }
});

/**
 * A fresh writable root over the unpacked image, as a container runtime's
 * snapshot is: an overlay whose upper layer is new, so nothing one
 * container wrote (the iptables wrapper's choice) is seen by the next.
 */
export async function freshRoot(lower: string, id = nextId()): Promise<Root> {
  const dir = join(tmpdir(), id);
  for (const d of ["upper", "work", "root"]) mkdirSync(join(dir, d), { recursive: true });
  const path = join(dir, "root");
  await run(["mount", "-t", "overlay", "overlay", "-o", `lowerdir=${lower},upperdir=${dir}/upper,workdir=${dir}/work`, path]);
  live.set(id, path);
  return {
    path,
    async remove() {
      live.delete(id);
      await run(["umount", "-l", path]).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface Container {
  readonly id: string;
  /** runc's process: its output is the container's */
  readonly proc: KpngProcess;
  /** stops the container (SIGTERM, then SIGKILL) and removes it and its root; idempotent */
  remove(): Promise<void>;
}

/**
 * Runs the image unpacked in `bundle` (unpackImage) under runc with `spec`,
 * in the foreground (runc's output is the container's), on a fresh root.
 */
export async function runPod(bundle: string, base: RuntimeConfig, spec: PodSpec): Promise<Container> {
  const id = nextId();
  const root = await freshRoot(join(bundle, "rootfs"), id);
  const dir = join(root.path, "..");
  writeFileSync(
    join(dir, "config.json"),
    JSON.stringify({ ...podRuntimeConfig(base, { capabilities: heldCapabilities(), ...spec }), root: { path: root.path } }, null, 1),
  );
  const proc = startKpng(["run", "--bundle", dir, id], { bin: "runc" });
  let removed = false;
  return {
    id,
    proc,
    async remove() {
      if (removed) return;
      removed = true;
      await Promise.race([proc.stop("SIGTERM"), Bun.sleep(5_000)]);
      await run(["runc", "kill", id, "KILL"]).catch(() => {});
      await run(["runc", "delete", "--force", id]).catch(() => {});
      await proc.proc.exited;
      await root.remove();
    },
  };
}
