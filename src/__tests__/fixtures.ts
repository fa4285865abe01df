// What the jest specs share (not a spec: no tests of its own): the server's
// records as the panel receives them, and JupyterLab's services over a fake
// socket.
import { ICluster, IRun } from '../api';
import { FakeSocket } from './fakesocket';

export function cluster(id: string, alive: boolean): ICluster {
  return {
    id,
    address: `tcp://${id}:8786`,
    dashboard: null,
    first_seen: 0,
    last_seen: 0,
    alive,
    silent_since: null
  };
}

export function run(id: number): IRun {
  return {
    id,
    name: 'etl',
    status: 'finished',
    started: id,
    ended: id + 1,
    duration_s: 1,
    n_tasks: 1,
    n_failed: 0,
    n_flags: 0,
    cluster: null,
    partial: null,
    n_lost: 0,
    n_running: 0
  };
}

/**
 * `@jupyterlab/services` as the stream client uses it, its websockets fake
 * (`jest.mock` it with `jest.requireActual('./fixtures').services()`: the
 * mock's factory runs before the spec's own imports).
 */
export function services(): Record<string, unknown> {
  return {
    ServerConnection: {
      makeSettings: () => ({
        wsUrl: 'ws://lab/',
        baseUrl: 'http://lab/',
        appendToken: false,
        WebSocket: FakeSocket
      })
    }
  };
}
