// Logs an operator can grep: one line per event, `LEVEL component: message key=value ...`.
// Written to stderr so stdout stays free for `--dry-run` output and `kpng local`.

export type Level = "debug" | "info" | "warn" | "error";
const order: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(component: string): Logger;
}

export interface LogOptions {
  level?: Level;
  write?: (line: string) => void;
}

const fmt = (v: unknown) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return /[\s"]/.test(s) ? JSON.stringify(s) : s;
};

export function createLogger(component = "kpng", opts: LogOptions = {}): Logger {
  const min = order[opts.level ?? ((process.env.KPNG_LOG_LEVEL as Level | undefined) ?? "info")] ?? 1;
  const write = opts.write ?? ((line: string) => process.stderr.write(line + "\n"));
  const emit = (level: Level, msg: string, fields?: Record<string, unknown>) => {
    if (order[level] < min) return;
    const kv = fields ? Object.entries(fields).map(([k, v]) => ` ${k}=${fmt(v)}`).join("") : "";
    write(`${new Date().toISOString()} ${level.toUpperCase()} ${component}: ${msg}${kv}`);
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (c) => createLogger(`${component}/${c}`, opts),
  };
}

/** A logger that remembers lines, for tests. */
export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return Object.assign(createLogger("test", { level: "debug", write: (l) => lines.push(l) }), { lines });
}
