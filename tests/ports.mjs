// Loopback ports for servers started by the Node tests. They come from
// below the kernel's ephemeral range (32768-60999), so no outgoing
// connection takes one as its source port between the pick and the
// server's bind, and never twice in one run.
import net from 'node:net';

const PORT_LOW = 10000;
const PORT_SPAN = 22000;
let portNext = (process.pid * 7919 + Date.now()) % PORT_SPAN;

function tryPort(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A loopback port nothing listens on now, not handed out before in this process. */
export async function freePort() {
  for (let i = 0; i < PORT_SPAN; i++) {
    const port = PORT_LOW + (portNext++ % PORT_SPAN);
    if (await tryPort(port)) return port;
  }
  throw new Error('no free loopback port');
}
