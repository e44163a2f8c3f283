// Where the backend attaches and pins, decided before any BPF call: the
// checks a node without cgroup v2 or bpffs fails with one line.

import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureBpffs, mountsOf, resolveCgroup } from "../../plugins/ebpf/attach.ts";

const MOUNTINFO = [
  "25 1 0:23 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
  "36 25 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw",
  "37 25 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
  "40 22 0:35 / /sys/fs/bpf rw,relatime - bpf bpf rw,mode=700",
].join("\n");

test("mountsOf reads the mount points of one file system type", () => {
  expect(mountsOf("cgroup2", MOUNTINFO)).toEqual(["/sys/fs/cgroup/unified"]);
  expect(mountsOf("bpf", MOUNTINFO)).toEqual(["/sys/fs/bpf"]);
  expect(mountsOf("cgroup", MOUNTINFO)).toEqual(["/sys/fs/cgroup/memory"]);
});

test.each([
  ["a missing directory", (d: string) => join(d, "nope"), "no such directory"],
  ["a plain directory (or a cgroup v1 one)", (d: string) => d, "not a cgroup v2 directory (no cgroup.controllers)"],
])("--ebpf-cgroup naming %s: one line naming the flag, the path and why", (_n, path, why) => {
  const d = mkdtempSync(join(tmpdir(), "kpng-ebpf-unit-"));
  try {
    const mounts: string[] = [];
    expect(() => resolveCgroup(path(d), (t, dir) => void mounts.push(`${t} ${dir}`))).toThrow(
      `[unavailable] ebpf backend: --ebpf-cgroup ${path(d)}: ${why}`,
    );
    expect(mounts).toEqual([]);
  } finally {
    rmSync(d, { recursive: true });
  }
});

test("a pin directory outside any bpffs and outside /sys/fs/bpf: refused, nothing mounted", () => {
  const mounts: string[] = [];
  expect(() => ensureBpffs("/tmp/kpng-ebpf-no-bpffs/kpng", "/sys/fs/bpf", (t, dir) => void mounts.push(`${t} ${dir}`))).toThrow(
    "pin directory /tmp/kpng-ebpf-no-bpffs/kpng is not on a bpf file system",
  );
  expect(mounts).toEqual([]);
});
