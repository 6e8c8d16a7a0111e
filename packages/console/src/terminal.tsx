// A terminal in the page: a login shell on a PTY in the sandbox, over the gateway's command stream WebSocket.
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'react';
import { type CommandInfo, gatewayJson } from './gateway.tsx';
import { type Attachment, attach } from './stream.tsx';

const MIN_COLS = 20;
const MIN_ROWS = 5;

/**
 * The columns and rows that fill the host element, from the size of one cell as xterm.js drew it (its screen element is
 * exactly cols × rows cells). Undefined until xterm.js has drawn.
 */
function fittedSize(term: XTerm, host: HTMLElement): { cols: number; rows: number } | undefined {
  const screen = host.querySelector<HTMLElement>('.xterm-screen');
  if (!screen || screen.clientWidth === 0 || screen.clientHeight === 0) return undefined;
  const cellWidth = screen.clientWidth / term.cols;
  const cellHeight = screen.clientHeight / term.rows;
  const style = getComputedStyle(host);
  const width = host.clientWidth - Number.parseFloat(style.paddingLeft) - Number.parseFloat(style.paddingRight);
  const height = host.clientHeight - Number.parseFloat(style.paddingTop) - Number.parseFloat(style.paddingBottom);
  return { cols: Math.max(MIN_COLS, Math.floor(width / cellWidth)), rows: Math.max(MIN_ROWS, Math.floor(height / cellHeight)) };
}

export function Terminal({ sandboxId }: { sandboxId: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState('connecting');
  const [size, setSize] = useState('');
  useEffect(() => {
    const el = host.current!;
    const term = new XTerm({ cols: 100, rows: 24, convertEol: false, fontSize: 14 });
    term.open(el);
    let attachment: Attachment | undefined;
    let disposed = false;
    const fit = () => {
      const s = fittedSize(term, el);
      if (s && (s.cols !== term.cols || s.rows !== term.rows)) term.resize(s.cols, s.rows);
    };
    fit();
    setSize(`${term.cols}×${term.rows}`);
    // The PTY follows the element: a resized window or a dragged corner resizes the shell's terminal too.
    const observer = new ResizeObserver(() => fit());
    observer.observe(el);
    term.onResize(({ cols, rows }) => {
      setSize(`${cols}×${rows}`);
      attachment?.send(JSON.stringify({ type: 'resize', cols, rows }));
    });
    const start = async () => {
      const cmd = await gatewayJson<CommandInfo>(sandboxId, '/commands', {
        method: 'POST',
        json: { argv: ['/bin/bash', '-l'], envs: { TERM: 'xterm-256color' }, stdin: true, pty: { cols: term.cols, rows: term.rows }, timeoutMs: 0 },
      });
      if (disposed) return;
      attachment = attach(sandboxId, cmd.id, 0, {
        onBytes: (_fd, bytes) => term.write(bytes),
        onStatus: (s) => {
          setStatus(s);
          // A size chosen while disconnected reaches the PTY once the stream is back.
          if (s === 'connected') attachment?.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
        },
      });
      const encoder = new TextEncoder();
      term.onData((d) => attachment?.send(encoder.encode(d)));
      term.focus();
    };
    start().catch((err: Error) => setStatus(`error: ${err.message}`));
    return () => {
      disposed = true;
      observer.disconnect();
      attachment?.close();
      term.dispose();
    };
  }, [sandboxId]);
  return (
    <section aria-label="Terminal">
      <h2>
        Terminal <small data-testid="terminal-status">{status}</small> <small data-testid="terminal-size">{size}</small>
      </h2>
      <div ref={host} className="terminal" data-testid="terminal" />
    </section>
  );
}
