// Plain curl against kpng's API on a unix socket, as a user without buf
// checks a brain: the Connect protocol is HTTP with a JSON body.

/**
 * `curl -sS --unix-socket SOCK -H "Content-Type: TYPE" --data-binary @- FLAGS http://localhost PATH`
 * with `body` on its stdin: what curl wrote to stdout.
 */
export async function curlSocket(opts: { sock: string; path: string; type: string; body: Uint8Array; flags?: string[] }): Promise<Buffer> {
  const p = Bun.spawn(
    [
      "curl",
      "-sS",
      "--unix-socket",
      opts.sock,
      "-H",
      `Content-Type: ${opts.type}`,
      "--data-binary",
      "@-",
      ...(opts.flags ?? []),
      `http://localhost${opts.path}`,
    ],
    { stdin: opts.body, stdout: "pipe" },
  );
  const out = Buffer.from(await new Response(p.stdout).arrayBuffer());
  await p.exited;
  return out;
}
