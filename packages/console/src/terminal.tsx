// A terminal in the page: a login shell on a PTY in the sandbox, over the gateway's command stream WebSocket.
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'react';
import { type Access, call } from './api.tsx';

const FRAME_HEADER_BYTES = 9;

export function Terminal({ sandboxId }: { sandboxId: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState('connecting');
  useEffect(() => {
    const term = new XTerm({ cols: 100, rows: 24, convertEol: false, fontSize: 14 });
    term.open(host.current!);
    let socket: WebSocket | undefined;
    let closed = false;
    const start = async () => {
      // A token for this sandbox from the control plane, as the SDK gets one; the page then talks to the gateway.
      const access = await call<Access>('POST', `/v1/sandboxes/${encodeURIComponent(sandboxId)}/access`);
      const base = `${access.gatewayUrl}/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
      const res = await fetch(`${base}/commands`, {
        method: 'POST',
        headers: { authorization: `Bearer ${access.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          argv: ['/bin/bash', '-l'],
          envs: { TERM: 'xterm-256color' },
          stdin: true,
          pty: { cols: term.cols, rows: term.rows },
          timeoutMs: 0,
        }),
      });
      if (!res.ok) throw new Error(`the gateway refused the terminal (${res.status})`);
      const cmd = (await res.json()) as { id: string };
      let offset = 0;
      const connect = () => {
        const ws = new WebSocket(
          `${base.replace(/^http/, 'ws')}/commands/${encodeURIComponent(cmd.id)}/stream?fromOffset=${offset}&access_token=${encodeURIComponent(access.token)}`,
        );
        ws.binaryType = 'arraybuffer';
        ws.onopen = () => setStatus('connected');
        ws.onmessage = (m) => {
          if (typeof m.data === 'string') {
            const msg = JSON.parse(m.data) as { type: string };
            if (msg.type === 'exit') {
              closed = true;
              setStatus('exited');
            }
            return;
          }
          const frame = new Uint8Array(m.data as ArrayBuffer);
          const view = new DataView(frame.buffer);
          const bytes = frame.subarray(FRAME_HEADER_BYTES);
          offset = Number(view.getBigUint64(1)) + bytes.length;
          term.write(bytes);
        };
        // Reattach from the last byte shown, so a dropped connection loses and repeats nothing.
        ws.onclose = () => {
          if (closed) return;
          setStatus('reconnecting');
          setTimeout(connect, 1000);
        };
        socket = ws;
      };
      connect();
      const encoder = new TextEncoder();
      term.onData((d) => socket?.readyState === WebSocket.OPEN && socket.send(encoder.encode(d)));
      term.onResize(({ cols, rows }) => socket?.readyState === WebSocket.OPEN && socket.send(JSON.stringify({ type: 'resize', cols, rows })));
      term.focus();
    };
    start().catch((err: Error) => setStatus(`error: ${err.message}`));
    return () => {
      closed = true;
      socket?.close();
      term.dispose();
    };
  }, [sandboxId]);
  return (
    <section aria-label="Terminal">
      <h2>
        Terminal <small data-testid="terminal-status">{status}</small>
      </h2>
      <div ref={host} className="terminal" data-testid="terminal" />
    </section>
  );
}
