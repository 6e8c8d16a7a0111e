// Public surface of @sandglass/agent-client: the host side of spec/agent-protocol.md.
export {
  AgentClient,
  type AgentClientOptions,
  type AttachHandle,
  type AttachOptions,
  type InputResult,
  type NetDialOptions,
  type NetListenOptions,
  type NetOpenListener,
  type OutputFd,
  type StreamOptions,
  type WatchOptions,
  type WriteFileOptions,
  type WriteTarOptions,
} from './client.js';
export { AgentError, MAX_AGENT_MESSAGE_CHARS } from './errors.js';
export type { AgentTransport, CallOptions, ProtocolViolation } from './mux.js';
export { FileReadStream, NetConnection } from './streams.js';
export { connectUnix, connectUnixSocket, type ConnectUnixOptions } from './connect.js';
export { encodeFrame, encodeJsonFrame, FrameDecoder, FrameType, MAX_DATA_BYTES, MAX_FRAME_LENGTH, type Frame } from './frame.js';
export type * from './types.js';
