// A sandbox's background commands: start one, list them with their state, and (re)attach to a command's output.
import { useCallback, useEffect, useRef, useState } from 'react';
import { ApiError } from './api.js';
import { type CommandInfo, gatewayJson } from './gateway.tsx';
import { attach } from './stream.tsx';

/** Output kept on the page per attachment; the gateway's own buffer is bounded too, and older bytes are dropped first. */
const MAX_SHOWN_CHARS = 200_000;

function outcome(c: CommandInfo): string {
  if (c.state === 'running') return 'running';
  if (c.timedOut) return `timed out (${c.signal ?? 'killed'})`;
  return c.signal ? `killed by ${c.signal}` : `exit ${c.exitCode ?? '?'}`;
}

/** `version` changes when the page's event stream saw a command start or exit: the list reloads once then. */
export function BackgroundCommands({ sandboxId, version }: { sandboxId: string; version: number }) {
  const [commands, setCommands] = useState<CommandInfo[]>([]);
  const [cmd, setCmd] = useState('');
  const [attached, setAttached] = useState<string>();
  const [error, setError] = useState('');
  const fail = useCallback((e: Error) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e.message), []);
  const load = useCallback(() => {
    gatewayJson<{ commands: CommandInfo[] }>(sandboxId, '/commands').then((r) => setCommands(r.commands.filter((c) => !c.pty)), fail);
  }, [sandboxId, fail]);
  // biome-ignore lint/correctness/useExhaustiveDependencies: version is the reload signal itself.
  useEffect(load, [load, version]);

  const start = async (e: React.FormEvent) => {
    e.preventDefault();
    try {
      // No timeout: a background command runs until it ends or is stopped here.
      const c = await gatewayJson<CommandInfo>(sandboxId, '/commands', { method: 'POST', json: { cmd, timeoutMs: 0 } });
      setCmd('');
      setAttached(c.id);
      load();
    } catch (err) {
      fail(err as Error);
    }
  };
  const stop = (c: CommandInfo) =>
    gatewayJson(sandboxId, `/commands/${encodeURIComponent(c.id)}/signal`, { method: 'POST', json: { signal: 'SIGTERM' } }).then(load, fail);

  return (
    <section aria-label="Background commands">
      <h2>Background commands</h2>
      <form className="toolbar" onSubmit={start}>
        <label>
          Command <input value={cmd} onChange={(e) => setCmd(e.target.value)} spellCheck={false} required size={50} />
        </label>
        <button type="submit">Run in background</button>
      </form>
      {error && <p role="alert">{error}</p>}
      <table data-testid="commands">
        <thead>
          <tr>
            <th>Command</th>
            <th>Started</th>
            <th>State</th>
            <th>Output</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
          {commands.map((c) => (
            <tr key={c.id} data-testid="command-row">
              <td>
                <code>{c.argv.join(' ')}</code>
              </td>
              <td>{c.startedAt}</td>
              <td data-testid="command-state">{outcome(c)}</td>
              <td>{c.outputBytes} B</td>
              <td>
                <button type="button" onClick={() => setAttached(attached === c.id ? undefined : c.id)} aria-pressed={attached === c.id}>
                  {attached === c.id ? 'Hide output' : 'Show output'}
                </button>
                {c.state === 'running' && (
                  <button type="button" onClick={() => stop(c)}>
                    Stop
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {attached && <CommandOutput key={attached} sandboxId={sandboxId} commandId={attached} onExit={load} />}
    </section>
  );
}

/** One command's output from the start of the gateway's buffer, live while it runs. */
function CommandOutput({ sandboxId, commandId, onExit }: { sandboxId: string; commandId: string; onExit: () => void }) {
  const [text, setText] = useState('');
  const [status, setStatus] = useState('connecting');
  const exitRef = useRef(onExit);
  exitRef.current = onExit;
  useEffect(() => {
    const decoders = new Map<number, TextDecoder>();
    const a = attach(sandboxId, commandId, 0, {
      onBytes: (fd, bytes) => {
        let d = decoders.get(fd);
        if (!d) decoders.set(fd, (d = new TextDecoder()));
        const chunk = d.decode(bytes, { stream: true });
        setText((prev) => (prev + chunk).slice(-MAX_SHOWN_CHARS));
      },
      onExit: () => exitRef.current(),
      onStatus: setStatus,
    });
    return () => a.close();
  }, [sandboxId, commandId]);
  return (
    <figure className="output">
      <figcaption>
        Output of <code>{commandId}</code> <small data-testid="output-status">{status}</small>
      </figcaption>
      <pre data-testid="command-output">{text}</pre>
    </figure>
  );
}
