// @sandglass/server: the embedded deployment (`sandglass up`) wiring the control plane, one gateway, SQLite and local storage.
export { up, start, type UpOptions, type Running } from './up.js';
export { doctor, formatDoctor, type DoctorReport } from './doctor.js';
export { nodeAccel } from './accel.js';
export { startGateway, gatewayNode, parseListen, type GatewayNodeOptions, type RunningGatewayNode } from './gateway-node.js';
export { startControlPlaneNode, controlPlaneNode, type ControlPlaneNodeOptions, type RunningControlPlaneNode } from './control-plane-node.js';
