// Logs an operator can grep: one line per event, to stderr so stdout stays
// free for `--dry-run` output and `kpng local`. Two formats, as Kubernetes
// components have (component-base/logs):
//   text: `2026-01-02T03:04:05.678Z INFO kpng: message key=value ...`
//   json: `{"ts":1767323045678.123,"v":0,"msg":"message","component":"kpng","key":"value"}`
// with the field names of component-base's JSON logger: `ts` (milliseconds
// since the epoch, a float), `v` (the verbosity of an info line), `msg`,
// `err` for an error line's error, then the key/values. Verbosity follows
// klog: an info line has a level V (0 unless logged through `v(n)`; debug
// lines are V(4)) and is written when V <= `-v`. Warnings and errors are
// always written; a JSON warning carries `"severity":"warning"`, since
// Kubernetes' JSON has no level field.

export type Level = "debug" | "info" | "warn" | "error";
const order: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };
/** klog's convention: V(4) is debug detail. */
export const DEBUG_V = 4;

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(component: string): Logger;
  /** a logger whose info lines are at verbosity `level` (klog's `V(level)`) */
  v(level: number): Logger;
}

export interface LogOptions {
  /** the least severity written; set, it replaces the verbosity rule (tests, benches) */
  level?: Level;
  write?: (line: string) => void;
  format?: "text" | "json";
  verbosity?: number;
}

/** Process-wide settings, as klog's flags are: the CLI sets them once from -v and --logging-format. */
const settings: Required<Omit<LogOptions, "level">> & { level?: Level } = {
  write: (line) => process.stderr.write(line + "\n"),
  format: "text",
  // KPNG_LOG_LEVEL (debug, warn, error) predates -v; debug means V(4).
  verbosity: process.env.KPNG_LOG_LEVEL === "debug" ? DEBUG_V : 0,
  level: process.env.KPNG_LOG_LEVEL === "warn" || process.env.KPNG_LOG_LEVEL === "error" ? process.env.KPNG_LOG_LEVEL : undefined,
};

/** Applies -v / --logging-format to every logger that was not given its own options. */
export function configureLogging(opts: { format?: "text" | "json"; verbosity?: number }): void {
  if (opts.format) settings.format = opts.format;
  if (opts.verbosity !== undefined) settings.verbosity = Math.max(settings.verbosity, opts.verbosity);
}

/** The format in force, for the CLI's last words (a fatal error) to match the other lines. */
export const logFormat = (): "text" | "json" => settings.format;

const fmt = (v: unknown) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return /[\s"]/.test(s) ? JSON.stringify(s) : s;
};

const jsonValue = (v: unknown) => (v instanceof Error ? v.message : typeof v === "bigint" ? String(v) : v);

/** The JSON line: Kubernetes' fixed fields first, then kpng's component, then the key/values. */
export function jsonLine(now: number, level: Level, v: number, component: string, msg: string, fields?: Record<string, unknown>): string {
  const out: Record<string, unknown> = { ts: now, ...(level === "error" ? {} : { v }), msg, component };
  if (level === "warn") out.severity = "warning";
  for (const [k, val] of Object.entries(fields ?? {})) out[level === "error" && k === "error" ? "err" : k] = jsonValue(val);
  return JSON.stringify(out);
}

export function createLogger(component = "kpng", opts: LogOptions = {}, lineV = 0): Logger {
  const own = opts.level !== undefined || opts.write !== undefined || opts.format !== undefined || opts.verbosity !== undefined;
  const s = () => (own ? { ...settings, level: undefined, ...opts } : settings);
  const emit = (level: Level, msg: string, fields?: Record<string, unknown>) => {
    const cur = s();
    const v = level === "debug" ? Math.max(lineV, DEBUG_V) : lineV;
    if (cur.level !== undefined ? order[level] < order[cur.level] : (level === "info" || level === "debug") && v > cur.verbosity) return;
    if (cur.format === "json") {
      cur.write(jsonLine(performance.timeOrigin + performance.now(), level, v, component, msg, fields));
      return;
    }
    const kv = fields
      ? Object.entries(fields)
          .map(([k, val]) => ` ${k}=${fmt(val)}`)
          .join("")
      : "";
    cur.write(`${new Date().toISOString()} ${level.toUpperCase()} ${component}: ${msg}${kv}`);
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (c) => createLogger(`${component}/${c}`, opts, lineV),
    v: (level) => createLogger(component, opts, level),
  };
}

/** A logger that remembers lines, for tests. */
export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return Object.assign(createLogger("test", { level: "debug", write: (l) => lines.push(l) }), { lines });
}
