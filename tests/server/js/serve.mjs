// serve.mjs — starts `$CMF_BIN serve MODEL --port 0 ...` as a child process for a Node test, reads the port from
// its "listening on http://HOST:PORT" line, and stops it with SIGTERM (the exit status must be 0).
import { spawn } from 'node:child_process';

export function startServer(model, args = []) {
  const bin = process.env.CMF_BIN;
  if (!bin) throw new Error('CMF_BIN is not set');
  const proc = spawn(bin, ['serve', model, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('cmf serve did not start in 60 s')); }, 60000);
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`cmf serve exited early (${code})`)); });
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on http:\/\/([^ ]+):(\d+)/);
      if (m) {
        clearTimeout(timer);
        proc.removeAllListeners('exit');
        const port = Number(m[2]);
        resolve({
          port,
          url: `http://127.0.0.1:${port}`,
          stop: () => new Promise((res) => {
            const kill = setTimeout(() => proc.kill('SIGKILL'), 10000);
            proc.on('exit', (code, sig) => { clearTimeout(kill); res(sig ? -1 : code); });
            proc.kill('SIGTERM');
          }),
        });
      }
    });
  });
}
