// Paces a command's output into a WebSocket: the agent gets its credit back only as the socket's send buffer drains.
import type { WebSocket } from 'ws';

/**
 * Agent credit of one output stream sent to a WebSocket. A client that stops reading holds the agent once this much
 * is queued on the gateway (plus OUTPUT_LOW_WATER_BYTES already credited), while the guest keeps running and its
 * output goes to the agent's ring.
 */
export const OUTPUT_WINDOW_BYTES = 1024 * 1024;
/** Credit held back goes to the agent once the socket has no more than this queued. */
export const OUTPUT_LOW_WATER_BYTES = 256 * 1024;

/**
 * A sender for the pieces of a deferred-credit attach (AgentClient.procAttach with `deferCredit`): each piece's
 * release runs only once the socket's queue (ws `bufferedAmount`: the sender's and the TCP socket's user-space
 * buffers) is at or below lowWaterBytes, checked as each send completes. Bytes the client does not read therefore
 * stay in the guest, not in the gateway's memory. On a socket no longer open the piece is dropped and released.
 */
export function pacedSender(socket: WebSocket, lowWaterBytes = OUTPUT_LOW_WATER_BYTES): (frame: Buffer, release: () => void) => void {
  const held: Array<() => void> = [];
  const drain = () => {
    if (socket.bufferedAmount > lowWaterBytes) return;
    for (const release of held.splice(0)) release();
  };
  return (frame, release) => {
    if (socket.readyState !== socket.OPEN) return release();
    held.push(release);
    socket.send(frame, { binary: true }, drain);
    drain();
  };
}
