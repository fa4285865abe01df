// What the jest specs share (not a spec: no tests of its own): the server's
// records as the panel receives them, and JupyterLab's services over a fake
// socket.
import { Signal } from '@lumino/signaling';

import type { IArchiveRun, ICluster, IEvent, IMetric, IRun } from '../data/api';
import type { ITarget } from '../data/stream';
import { FakeSocket } from './fakesocket';

/** What a metrics model listens to of a stream: its rows and its resets. */
export class FakeMetricStream {
  metrics = new Signal<this, IMetric[]>(this);
  events = new Signal<this, IEvent[]>(this);
  reset = new Signal<this, ITarget>(this);
}

/** A metric row as the stream sends it (its time as its sequence number). */
export function sample(
  time: number,
  worker: string | null,
  name: string,
  value = 1
): IMetric {
  return { seq: time, time, worker, name, value };
}

export function cluster(id: string, alive: boolean): ICluster {
  return {
    id,
    address: `tcp://${id}:8786`,
    dashboard: null,
    first_seen: 0,
    last_seen: 0,
    alive,
    silent_since: null,
    notebooks: []
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

/** A run of the team's archive, as the server lists it. */
export function archived(i: number): IArchiveRun {
  const { id, ...rest } = run(i);
  return {
    ...rest,
    id: `20260101T000000Z-${id.toString(16).padStart(12, '0')}`,
    host: 'a',
    user: 'me'
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
