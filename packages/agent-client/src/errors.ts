// The agent client's one error type, and the bounding of errors the guest sends before they travel further.
import type { ErrorInfo } from './types.js';

/** An error reply from the agent (`code` is the agent's code) or a host-side failure (`agent_*`). */
export class AgentError extends Error {
  readonly code: string;

  constructor(code: string, message: string, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AgentError';
    this.code = code;
  }
}

/** Longest error message kept from the agent: it ends up in logs, events and API responses. */
export const MAX_AGENT_MESSAGE_CHARS = 1024;

/** An error the agent sent; code and message are the guest's words, so both are bounded before they travel further. */
export function agentErrorOf(error: ErrorInfo): AgentError {
  const code = typeof error?.code === 'string' && /^[a-z_]{1,32}$/.test(error.code) ? error.code : 'agent_protocol';
  const message = typeof error?.message === 'string' ? error.message : 'the agent sent an error without a message';
  return new AgentError(code, message.length > MAX_AGENT_MESSAGE_CHARS ? `${message.slice(0, MAX_AGENT_MESSAGE_CHARS)}…` : message);
}
