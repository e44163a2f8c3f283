// --listen: addresses, the loopback rule, and what already sits at a socket path.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkListenAllowed, parseApiAddress, parseClientAddress } from "../../../src/core/api/server/address.ts";
import { ROOT, startKpng, startServe, tempDir } from "../../harness/kpng-process.ts";
import { curlSocket } from "../../harness/socket-curl.ts";

const dir = tempDir("kpng-listen-");
beforeAll(() => dir.create());
afterAll(() => dir.remove());
const input = join(ROOT, "examples/cluster.yaml");

describe("addresses", () => {
  const good: Array<[string, unknown]> = [
    ["unix:///run/kpng.sock", { kind: "unix", path: "/run/kpng.sock" }],
    ["tcp://127.0.0.1:12090", { kind: "tcp", host: "127.0.0.1", port: 12090 }],
    ["tcp://[::1]:0", { kind: "tcp", host: "::1", port: 0 }],
    ["tcp://localhost:1", { kind: "tcp", host: "localhost", port: 1 }],
  ];
  for (const [spec, want] of good) test(`${spec} parses`, () => expect(parseApiAddress(spec)).toEqual(want as never));

  const bad: Array<[string, RegExp]> = [
    ["http://127.0.0.1:1", /must start with unix:\/\/ or tcp:\/\//],
    ["unix://", /has no socket path/],
    ["tcp://127.0.0.1", /must be tcp:\/\/HOST:PORT/],
    ["tcp://127.0.0.1:70000", /port is out of range/],
  ];
  for (const [spec, want] of bad) test(`${spec} is refused naming the flag`, () => expect(() => parseApiAddress(spec)).toThrow(want));

  test("a client also takes kpng's bare HOST:PORT and a bare socket path", () => {
    expect(parseClientAddress("127.0.0.1:12090")).toEqual({ kind: "tcp", host: "127.0.0.1", port: 12090 });
    expect(parseClientAddress("/run/kpng.sock")).toEqual({ kind: "unix", path: "/run/kpng.sock" });
  });

  const loopback: Array<[string, boolean, boolean]> = [
    ["tcp://127.0.0.1:1", false, true],
    ["tcp://127.1.2.3:1", false, true],
    ["tcp://[::1]:1", false, true],
    ["unix:///x.sock", false, true],
    ["tcp://0.0.0.0:1", false, false],
    ["tcp://[::]:1", false, false],
    ["tcp://203.0.113.11:1", false, false],
    ["tcp://0.0.0.0:1", true, true],
  ];
  for (const [spec, any, ok] of loopback) {
    test(`${spec}${any ? " with --listen-any" : ""}: ${ok ? "allowed" : "refused"}`, () => {
      const check = () => checkListenAllowed(parseApiAddress(spec), any, spec);
      if (ok) expect(check).not.toThrow();
      else expect(check).toThrow(/not a loopback address.*--listen-any/);
    });
  }
});

describe("kpng serve refuses bad --listen values with one line and exit code 2", () => {
  const file = join(dir.path, "plain-file");
  const subdir = join(dir.path, "a-directory");
  const cases: Array<{ name: string; listen: string; setup?: () => void; want: RegExp }> = [
    {
      name: "a path that is a regular file (left untouched)",
      listen: `unix://${file}`,
      setup: () => writeFileSync(file, "precious"),
      want: /exists and is not a socket/,
    },
    { name: "a path that is a directory", listen: `unix://${subdir}`, setup: () => mkdirSync(subdir), want: /exists and is not a socket/ },
    { name: "a socket in a missing directory", listen: `unix://${dir.path}/missing/api.sock`, want: /cannot listen: ENOENT/ },
    {
      name: "a non-loopback TCP address without --listen-any",
      listen: "tcp://0.0.0.0:12090",
      want: /not a loopback address.*--listen-any/,
    },
    { name: "an unknown scheme", listen: "udp://127.0.0.1:1", want: /must start with unix:\/\/ or tcp:\/\// },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      c.setup?.();
      const p = startKpng(["serve", "--input", input, "--listen", c.listen]);
      expect(await p.proc.exited).toBe(2);
      const errors = p.stderr.filter((l) => l.startsWith("kpng:"));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(c.want);
    });
  }
  test("the regular file is still there, unchanged", () => expect(readFileSync(file, "utf8")).toBe("precious"));
});

describe("a socket path already in use", () => {
  test("by a live brain: the second one fails, the first keeps serving", async () => {
    const sock = join(dir.path, "live.sock");
    const first = await startServe(["--input", input, "--listen", `unix://${sock}`]);
    try {
      const second = startKpng(["serve", "--input", input, "--listen", `unix://${sock}`]);
      expect(await second.proc.exited).toBe(1);
      expect(second.stderr.join("\n")).toContain("another process is serving on this socket");
      const status = await curlSocket({
        sock,
        path: "/localv1.Endpoints/Next",
        type: "application/json",
        body: Buffer.from('{"NodeName":"node-1"}'),
        flags: ["-o", "/dev/null", "-w", "%{http_code}"],
      });
      // A server-streaming RPC with a plain JSON body is not Connect streaming: 415 proves the brain answered.
      expect(status.toString()).toBe("415");
    } finally {
      await first.stop();
    }
  });

  test("by a leftover socket of a crashed run: replaced", async () => {
    const sock = join(dir.path, "stale.sock");
    const py = Bun.spawn(["python3", "-c", `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(sock)})`]);
    expect(await py.exited).toBe(0);
    expect(statSync(sock).isSocket()).toBe(true);
    const p = await startServe(["--input", input, "--listen", `unix://${sock}`]);
    expect(statSync(sock).mode & 0o777).toBe(0o660);
    await p.stop();
  });
});

test("the default command serves the API too when --listen is given", async () => {
  const sock = join(dir.path, "run.sock");
  const p = startKpng([
    "--input",
    input,
    "--node-name",
    "node-1",
    "--plugin",
    join(ROOT, "examples/plugins/jsonl-backend.ts"),
    "--listen",
    `unix://${sock}`,
    "--healthz-bind-address",
    "127.0.0.1:0",
    "--metrics-bind-address",
    "127.0.0.1:0",
  ]);
  try {
    await p.waitFor(/serving the API/);
    await p.waitForCount(/"op":"sync"/, 1);
    const out = await curlSocket({
      sock,
      path: "/localv1.Endpoints/Next",
      type: "application/connect+json",
      body: Buffer.from("\0\0\0\0\x02{}"),
    });
    expect(out.toString()).toContain('"NodeName":"node-1"');
  } finally {
    expect(await p.stop()).toBe(0);
  }
});
