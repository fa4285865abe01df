import { shortWorker } from '../sections/logs/list';

describe('shortWorker', () => {
  it('keeps what tells workers apart, in a narrow column', () => {
    expect(shortWorker('tcp://127.0.0.1:33761')).toBe(':33761');
    expect(shortWorker('tls://[::1]:8786')).toBe(':8786');
    expect(shortWorker('tcp://node-12.cluster.local:40123')).toBe(
      'node-12:40123'
    );
    expect(shortWorker('tcp://10.0.3.7:40123')).toBe('10.0.3.7:40123');
    expect(shortWorker('inproc://192.0.2.2/1922/4')).toBe('1922/4');
    expect(shortWorker('ucx://odd-address')).toBe('odd-address');
  });
});
