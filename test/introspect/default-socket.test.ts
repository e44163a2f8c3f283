// `kpng get` needs no flags (DESIGN.md's CLI contract): a node's kpng started
// without --listen serves the introspection service on unix:///run/kpng.sock,
// the address `kpng get` asks first. The whole process, as an operator runs it.
//
// Every process here runs in one private mount namespace with its own tmpfs
// on /run (`unshare -m`, held by a sleeping process; the others enter it with
// `nsenter -m`): the suite's other kpngs, in other bun processes, use the
// host's /run/kpng.sock at the same time, and must neither see nor disturb
// these ones.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { kpngCommand, ROOT, startKpng, type KpngProcess } from "../harness/kpng-process.ts";

const CLUSTER = join(ROOT, "examples/cluster.yaml");
const SOCKET = "/run/kpng.sock";
/** generous: kpng runs from source on a loaded 2-core machine */
const BOUND_MS = 60_000;

interface Holder {
  proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  /** the command prefix that runs a process in the namespace */
  wrap: string[];
}

/** A mount namespace with a fresh /run, alive while its sleeping process is. */
async function mountNamespace(): Promise<Holder> {
  const proc = Bun.spawn(
    ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o mode=755 tmpfs /run && echo ready && exec sleep 3600"],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe" },
  );
  const first = await new Response(proc.stdout).body!.getReader().read();
  const line = new TextDecoder().decode(first.value ?? new Uint8Array());
  if (!line.includes("ready")) throw new Error(`unshare -m: ${await new Response(proc.stderr).text()}`);
  return { proc, wrap: ["nsenter", "-t", String(proc.pid), "-m"] };
}

describe("kpng get with no flags: the run mode's default socket (private /run)", () => {
  let ns: Holder;
  const procs: KpngProcess[] = [];

  /** a command in the namespace: exit code and output */
  const inNs = async (argv: string[]) => {
    const p = Bun.spawn([...ns.wrap, ...argv], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    return { code, out, err };
  };
  const get = (...args: string[]) => inNs([...kpngCommand(), "get", ...args]);
  /** the node whose kpng answers `kpng get services -o json` (no --server), once one does */
  const answeringNode = async (want: string): Promise<string> => {
    const end = performance.now() + BOUND_MS;
    for (;;) {
      const r = await get("services", "-o", "json");
      const node = r.code === 0 ? (JSON.parse(r.out) as { nodeName: string }).nodeName : `exit ${r.code}: ${r.err.trim()}`;
      if (node === want || performance.now() > end) return node;
      await Bun.sleep(200);
    }
  };
  /** `stat` of the socket in the namespace: "MODE INODE", or "" when absent */
  const statSocket = async () => (await inNs(["stat", "-c", "%a %i", SOCKET])).out.trim();
  const kpng = (node: string, ...flags: string[]) => {
    const p = startKpng(["--input", CLUSTER, "--node-name", node, "--dry-run", ...flags], { wrap: ns.wrap });
    procs.push(p);
    return p;
  };

  beforeAll(async () => {
    ns = await mountNamespace();
  });

  afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    ns?.proc.kill("SIGKILL");
    await ns?.proc.exited;
  });

  let first: KpngProcess;
  let second: KpngProcess;
  let third: KpngProcess;
  let firstSocket = "";

  test(
    "a kpng started without --listen answers `kpng get services` (no flags) on /run/kpng.sock, mode 0660",
    async () => {
      first = kpng("node-1");
      expect(await answeringNode("node-1")).toBe("node-1");
      const table = await get("services", "default/dual");
      expect([table.code, table.out.split("\n")[1]]).toEqual([0, expect.stringMatching(/^default\s+dual\s+ClusterIP\s+http:80\/TCP/)]);
      firstSocket = await statSocket();
      expect(firstSocket).toMatch(/^660 \d+$/);
    },
    BOUND_MS * 2,
  );

  test(
    "a second kpng started meanwhile warns and runs without the socket: the first keeps it",
    async () => {
      second = kpng("node-2");
      await second.waitFor(
        /WARN kpng\/api: not serving kpng get and kpng verify on the default socket.*another process is serving/,
        BOUND_MS,
      );
      await second.waitFor(/INFO kpng: synced /, BOUND_MS);
      expect(second.proc.exitCode).toBeNull();
      expect(await answeringNode("node-1")).toBe("node-1");
      expect(await statSocket()).toBe(firstSocket);
    },
    BOUND_MS * 2,
  );

  test(
    "kill -9 leaves a dead socket; a new kpng replaces it, and the running second one does not take it",
    async () => {
      await first.stop("SIGKILL");
      expect(await statSocket()).toBe(firstSocket); // nobody removed it
      const dead = await get("services");
      expect([dead.code, dead.err]).toEqual([1, expect.stringContaining("connection refused")]);
      third = kpng("node-3");
      expect(await answeringNode("node-3")).toBe("node-3");
      expect(third.stderr.filter((l) => l.includes(" WARN "))).toEqual([]);
      expect(await statSocket()).not.toBe(firstSocket);
    },
    BOUND_MS * 2,
  );

  test(
    "on exit a kpng removes only the socket it bound",
    async () => {
      const socket = await statSocket();
      expect(await second.stop("SIGTERM")).toBe(0);
      expect(await statSocket()).toBe(socket);
      expect(await answeringNode("node-3")).toBe("node-3");
      expect(await third.stop("SIGTERM")).toBe(0);
      expect(await statSocket()).toBe("");
    },
    BOUND_MS * 2,
  );

  test(
    "--listen= (empty, kube-proxy's way to turn a server off) serves nothing: the next kpng takes the socket without a warning",
    async () => {
      const off = kpng("node-1", "--listen=");
      await off.waitFor(/INFO kpng: synced /, BOUND_MS);
      const on = kpng("node-2");
      expect(await answeringNode("node-2")).toBe("node-2");
      expect([...off.stderr, ...on.stderr].filter((l) => l.includes(" WARN ") || l.includes("default socket"))).toEqual([]);
    },
    BOUND_MS * 2,
  );
});
