// Progress lines for long first-start work (image build, template boot): a live bar on a TTY, plain lines otherwise.
export interface ProgressUpdate {
  step: string;
  message?: string;
  done?: number;
  total?: number;
}

export function progressPrinter(out: NodeJS.WriteStream = process.stdout): { update(p: ProgressUpdate): void; finish(): void } {
  const tty = Boolean(out.isTTY);
  let lastLine = '';
  let lastAt = 0;
  return {
    update(p) {
      const pct = p.total ? ` ${Math.floor(((p.done ?? 0) / p.total) * 100)}%` : '';
      const line = `[${p.step}]${pct} ${p.message ?? ''}`.trimEnd();
      if (tty) {
        out.write(`\r\x1b[K${line.slice(0, (out.columns ?? 100) - 1)}`);
        lastLine = line;
        return;
      }
      // Off a TTY, print each new message but rate-limit percentage-only updates.
      const now = Date.now();
      if (line === lastLine || (p.total && p.message === undefined && now - lastAt < 2000)) return;
      out.write(`${line}\n`);
      lastLine = line;
      lastAt = now;
    },
    finish() {
      if (tty && lastLine) out.write('\n');
      lastLine = '';
    },
  };
}
