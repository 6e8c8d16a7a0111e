// Public surface of @sandglass/agent-client: the host side of spec/agent-protocol.md.
export {
  AgentClient,
  AgentError,
  FileReadStream,
  NetConnection,
  type AgentClientOptions,
  type AgentTransport,
  type AttachHandle,
  type CallOptions,
  type NetListenOptions,
  type NetOpenListener,
  MAX_AGENT_MESSAGE_CHARS,
  type OutputFd,
  type ProtocolViolation,
  type StreamOptions,
  type WriteFileOptions,
} from './client.js';
export { connectUnix, connectUnixSocket, type ConnectUnixOptions } from './connect.js';
export { encodeFrame, FrameDecoder, FrameType, MAX_DATA_BYTES, MAX_FRAME_LENGTH, type Frame } from './frame.js';
export type * from './types.js';
