// What the node's local routing table holds, and whether the node reaches
// its own addresses: the checks of the route-ownership suites (issue 39).

import { pythonPath, run } from "../harness/netns.ts";

/**
 * The local table of both families in `ns`, one route a line, sorted;
 * `ours`: kpng's routes (proto 156), else everyone else's. Link-local IPv6
 * routes are left out: they come when an interface's DAD ends, whenever that is.
 */
export async function localTable(ns: string, ours: boolean): Promise<string[]> {
  const out: string[] = [];
  for (const fam of ["-4", "-6"]) {
    const text = await run(["ip", "-n", ns, fam, "route", "show", "table", "local"]);
    for (const line of text.split("\n").map((l) => l.trim()))
      if (line && !/^local fe80:/.test(line) && / proto 156 /.test(`${line} `) === ours) out.push(line.replace(/ linkdown/g, ""));
  }
  return out.sort();
}

/** one TCP connection from the node to `ip` on the node (bind, connect, accept): "ok" or the error */
const REACH = `
import socket, sys
ip = sys.argv[1]
fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
try:
    s = socket.socket(fam, socket.SOCK_STREAM); s.bind((ip, 0)); s.listen(1)
    c = socket.socket(fam, socket.SOCK_STREAM); c.settimeout(2); c.connect(s.getsockname()[:2])
    s.settimeout(2); a, _ = s.accept(); print("ok")
except Exception as e:
    print(type(e).__name__, e)
`;

/** whether the node in `ns` reaches each of `ips` (its own addresses): "ok" or the error, by address */
export async function reach(ns: string, ips: readonly string[]): Promise<Record<string, string>> {
  const py = await pythonPath();
  const out: Record<string, string> = {};
  for (const ip of ips) out[ip] = (await run(["ip", "netns", "exec", ns, py, "-S", "-c", REACH, ip])).trim();
  return out;
}

/**
 * Problems at `step`: a kernel route (`kernel`, the table before kpng) gone
 * or a route no one added, an own address the node cannot reach, kpng's
 * routes other than `ours` (when given).
 */
export async function tableProblems(
  ns: string,
  step: string,
  o: { kernel: readonly string[]; own: readonly string[]; ours?: readonly string[] },
): Promise<string[]> {
  const problems: string[] = [];
  const now = await localTable(ns, false);
  for (const r of o.kernel) if (!now.includes(r)) problems.push(`${step}: the kernel's route is gone: ${r}`);
  for (const r of now) if (!o.kernel.includes(r)) problems.push(`${step}: a route no one added: ${r}`);
  for (const [ip, r] of Object.entries(await reach(ns, o.own))) if (r !== "ok") problems.push(`${step}: the node cannot reach ${ip}: ${r}`);
  if (o.ours) {
    const mine = await localTable(ns, true);
    if (JSON.stringify(mine) !== JSON.stringify(o.ours))
      problems.push(`${step}: kpng's routes [${mine.join(", ")}], not [${o.ours.join(", ")}]`);
  }
  return problems;
}
