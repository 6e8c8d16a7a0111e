// A terminal in the page: a login shell on a PTY in the sandbox, over the gateway's command stream WebSocket.
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'react';
import { type CommandInfo, gatewayJson } from './gateway.tsx';
import { type Attachment, attach } from './stream.tsx';

const MIN_COLS = 20;
const MIN_ROWS = 5;

/** Room left for the viewport's scrollbar, as @xterm/addon-fit leaves it. */
const SCROLLBAR_PX = 14;

interface CellSize {
  width: number;
  height: number;
}

/**
 * The size of one cell as xterm.js measured it: the internal @xterm/addon-fit reads (that addon is not a dependency
 * here). Undefined until xterm.js has measured its font.
 */
function cellSize(term: XTerm): CellSize | undefined {
  const cell = (term as unknown as { _core?: { _renderService?: { dimensions?: { css?: { cell?: CellSize } } } } })._core?._renderService?.dimensions?.css
    ?.cell;
  return cell && cell.width > 0 && cell.height > 0 ? cell : undefined;
}

/** The columns and rows that fill the host element; undefined until xterm.js knows its cell size. */
function fittedSize(term: XTerm, host: HTMLElement): { cols: number; rows: number } | undefined {
  const cell = cellSize(term);
  if (!cell) return undefined;
  const style = getComputedStyle(host);
  const width = host.clientWidth - Number.parseFloat(style.paddingLeft) - Number.parseFloat(style.paddingRight) - SCROLLBAR_PX;
  const height = host.clientHeight - Number.parseFloat(style.paddingTop) - Number.parseFloat(style.paddingBottom);
  if (width <= 0 || height <= 0) return undefined;
  return { cols: Math.max(MIN_COLS, Math.floor(width / cell.width)), rows: Math.max(MIN_ROWS, Math.floor(height / cell.height)) };
}

/** `vm` names the VM the shell runs on (the seq of the event that started it; 0 for the first), so a test can tell shells apart. */
export function Terminal({ sandboxId, vm }: { sandboxId: string; vm: number }) {
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
    // xterm.js measures its font again once web fonts load; fit to that measure too.
    void document.fonts.ready.then(() => {
      if (!disposed) fit();
    });
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
    <section aria-label="Terminal" data-vm={vm}>
      <h2>
        Terminal <small data-testid="terminal-status">{status}</small> <small data-testid="terminal-size">{size}</small>
      </h2>
      <div ref={host} className="terminal" data-testid="terminal" />
    </section>
  );
}
