// The route generics type each handler by the spec: these assertions fail the type check (npm run typecheck, which
// covers test files) if a generated type or a generic degrades to `unknown`, where every handler would pass unchecked.
import { describe, expectTypeOf, it } from 'vitest';
import type * as ControlPlaneApi from './control-plane.generated.js';
import type * as GatewayApi from './gateway.generated.js';
import type { OperationAt, OperationHandler, OperationRoute, RequestBody, SuccessBody } from './route.js';

type CpOps = ControlPlaneApi.operations;
type Sandbox = ControlPlaneApi.components['schemas']['Sandbox'];

describe('route generics from the generated spec types', () => {
  it('types requests: body, path parameters and query from the operation', () => {
    expectTypeOf<RequestBody<CpOps['createSandbox']>>().toEqualTypeOf<ControlPlaneApi.components['schemas']['CreateSandboxRequest'] | undefined>();
    expectTypeOf<RequestBody<CpOps['setSandboxTimeout']>>().toEqualTypeOf<{ timeoutS: number }>();
    expectTypeOf<OperationRoute<CpOps['getSandbox']>['Params']>().toEqualTypeOf<{ id: string }>();
    expectTypeOf<OperationRoute<CpOps['listSandboxes']>['Querystring']>().toEqualTypeOf<{ state?: ControlPlaneApi.components['schemas']['SandboxState'] }>();
    expectTypeOf<OperationAt<ControlPlaneApi.paths, '/v1/sandboxes/{id}', 'GET'>>().toEqualTypeOf<CpOps['getSandbox']>();
    expectTypeOf<OperationAt<ControlPlaneApi.paths, '/v1/sandboxes/{id}', 'PUT'>>().toBeNever();
  });

  it('types replies: a handler may answer only a 2xx body of its operation', () => {
    expectTypeOf<SuccessBody<CpOps['getSandbox']>>().toEqualTypeOf<Sandbox>();
    expectTypeOf<SuccessBody<GatewayApi.operations['nodeForkSandboxes']>['sandboxes'][number]>().toEqualTypeOf<
      GatewayApi.components['schemas']['NodeSandbox'] | GatewayApi.components['schemas']['NodeForkFailure']
    >();

    const sandbox = {} as Sandbox;
    const getSandbox: OperationHandler<CpOps['getSandbox']> = async () => sandbox;
    const { memoryMib, ...rest } = sandbox;
    // @ts-expect-error a body the spec does not describe (a renamed field) is refused
    const renamed: OperationHandler<CpOps['getSandbox']> = async () => ({ ...rest, memoryMb: memoryMib });
    // @ts-expect-error a field of the wrong type is refused
    const mistyped: OperationHandler<CpOps['getSandbox']> = async () => ({ ...sandbox, memoryMib: String(memoryMib) });
    // @ts-expect-error an error body is no 2xx answer
    const errorBody: OperationHandler<CpOps['getSandbox']> = async () => ({ error: { code: 'internal' as const, message: 'x' } });
    expectTypeOf(getSandbox).toBeFunction();
    expectTypeOf(renamed).toBeFunction();
    expectTypeOf(mistyped).toBeFunction();
    expectTypeOf(errorBody).toBeFunction();
  });
});
