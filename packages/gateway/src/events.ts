// Where the gateway records what happened: the event log (directly in the embedded deployment).
export interface GatewayEvent {
  type: string;
  tenantId: string;
  sandboxId?: string;
  data: Record<string, unknown>;
}

export interface GatewayEvents {
  append(event: GatewayEvent): Promise<unknown> | unknown;
}
