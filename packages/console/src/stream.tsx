// Attaching to a command's output over the gateway's stream WebSocket, with reattachment from the last byte seen.
import { commandStreamUrl } from './gateway.tsx';

const FRAME_HEADER_BYTES = 9;
const RECONNECT_MS = 1000;

export interface AttachHandlers {
  /** Output bytes; `fd` 1 is stdout (or the PTY), 2 stderr. */
  onBytes: (fd: number, bytes: Uint8Array) => void;
  onExit?: (exit: { exitCode: number | null; signal: string | null; timedOut: boolean }) => void;
  onStatus?: (status: 'connected' | 'reconnecting' | 'exited' | `error: ${string}`) => void;
}

export interface Attachment {
  send: (data: Uint8Array | string) => void;
  close: () => void;
}

/**
 * Follows a command's output from `fromOffset`. A dropped connection reattaches from the byte after the last one shown,
 * so it loses and repeats nothing while the gateway's buffer still holds those bytes.
 */
export function attach(sandboxId: string, commandId: string, fromOffset: number, h: AttachHandlers): Attachment {
  let offset = fromOffset;
  let socket: WebSocket | undefined;
  let closed = false;
  const connect = async () => {
    const ws = new WebSocket(await commandStreamUrl(sandboxId, commandId, offset));
    if (closed) {
      ws.close();
      return;
    }
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => h.onStatus?.('connected');
    ws.onmessage = (m) => {
      if (typeof m.data === 'string') {
        const msg = JSON.parse(m.data) as { type: string; exitCode?: number | null; signal?: string | null; timedOut?: boolean };
        if (msg.type === 'exit') {
          closed = true;
          h.onExit?.({ exitCode: msg.exitCode ?? null, signal: msg.signal ?? null, timedOut: msg.timedOut === true });
          h.onStatus?.('exited');
        }
        return;
      }
      const frame = new Uint8Array(m.data as ArrayBuffer);
      const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
      const bytes = frame.subarray(FRAME_HEADER_BYTES);
      offset = Number(view.getBigUint64(1)) + bytes.length;
      h.onBytes(frame[0] ?? 1, bytes);
    };
    ws.onclose = () => {
      if (closed) return;
      h.onStatus?.('reconnecting');
      setTimeout(() => void connect().catch(fail), RECONNECT_MS);
    };
    socket = ws;
  };
  const fail = (err: Error) => h.onStatus?.(`error: ${err.message}`);
  void connect().catch(fail);
  return {
    send: (data) => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(data);
    },
    close: () => {
      closed = true;
      socket?.close();
    },
  };
}
