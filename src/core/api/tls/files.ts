// Certificates and keys for the API's TCP listeners and clients, read from
// the files the operator named (kpng's flag names: `--listen-tls-crt/-key/-ca`
// on the serving side, `--tls-crt/-key/-ca` on clients). A bad file is bad
// input named by its flag; a file that changes later is read again, so a
// rotated certificate is used without a restart.

import { readFileSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { errorMessage, invalid } from "../../errors.ts";

/** Paths as given; each names the flag it came from in errors. */
export interface TlsFiles {
  crt?: string;
  key?: string;
  ca?: string;
}

/** The PEM texts of a TlsFiles. */
export interface TlsMaterial {
  cert?: string;
  key?: string;
  ca?: string;
}

export interface TlsFlagNames {
  crt: string;
  key: string;
  ca: string;
}

export const SERVER_FLAGS: TlsFlagNames = { crt: "--listen-tls-crt", key: "--listen-tls-key", ca: "--listen-tls-ca" };
export const CLIENT_FLAGS: TlsFlagNames = { crt: "--tls-crt", key: "--tls-key", ca: "--tls-ca" };

export const hasTls = (f: TlsFiles | undefined): f is TlsFiles => !!(f && (f.crt || f.key || f.ca));

/** Checks which files go together: a certificate needs its key and the other way round; a server needs both. */
export function checkTlsFiles(files: TlsFiles, flags: TlsFlagNames, server: boolean): void {
  if (!!files.crt !== !!files.key)
    throw invalid(`flag ${files.crt ? flags.key : flags.crt}: required with ${files.crt ? flags.crt : flags.key}`);
  if (server && !files.crt) throw invalid(`flag ${flags.crt}: required with ${flags.ca} (the server's own certificate and key)`);
}

/**
 * Reads the files and checks that TLS can use them (PEM that parses, a key
 * that matches its certificate). Throws a KpngError naming the flag and file.
 */
export function readTlsFiles(files: TlsFiles, flags: TlsFlagNames): TlsMaterial {
  const read = (which: keyof TlsFiles): string | undefined => {
    const path = files[which];
    if (!path) return undefined;
    try {
      return readFileSync(path, "utf8");
    } catch (err) {
      throw invalid(`flag ${flags[which]}: ${path}: cannot read: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
    }
  };
  const m: TlsMaterial = { cert: read("crt"), key: read("key"), ca: read("ca") };
  if (m.ca !== undefined) {
    try {
      createSecureContext({ ca: m.ca });
    } catch (err) {
      throw invalid(`flag ${flags.ca}: ${files.ca}: not a PEM certificate bundle: ${firstLine(err)}`);
    }
  }
  if (m.cert !== undefined) {
    try {
      createSecureContext({ cert: m.cert, key: m.key });
    } catch (err) {
      throw invalid(`flag ${flags.crt}/${flags.key}: ${files.crt}, ${files.key}: ${firstLine(err)}`);
    }
  }
  return m;
}

const firstLine = (err: unknown) =>
  errorMessage(err)
    .split("\n")[0]
    .replace(/^error:[0-9a-f]+:/, "");

const sameMaterial = (a: TlsMaterial, b: TlsMaterial) => a.cert === b.cert && a.key === b.key && a.ca === b.ca;

/**
 * Reads the files again every `intervalMs` and calls `onChange` with new,
 * valid material; a change that does not read or parse is reported to
 * `onError` and the old material stays in use. Polled rather than watched:
 * Kubernetes updates mounted Secrets by swapping a symlink, which a watch on
 * the file never sees. Returns a stop function.
 */
export function watchTlsFiles(
  files: TlsFiles,
  flags: TlsFlagNames,
  initial: TlsMaterial,
  opts: { intervalMs: number; onChange: (m: TlsMaterial) => void; onError: (message: string) => void },
): () => void {
  let current = initial;
  let lastError = "";
  const timer = setInterval(() => {
    let next: TlsMaterial;
    try {
      next = readTlsFiles(files, flags);
    } catch (err) {
      // A rotation writes the certificate and the key one after the other: report a mismatch once, not every tick.
      const message = errorMessage(err);
      if (message !== lastError) opts.onError(message);
      lastError = message;
      return;
    }
    lastError = "";
    if (sameMaterial(next, current)) return;
    current = next;
    opts.onChange(next);
  }, opts.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
