// A stand-in for "a server somewhere else": a tiny HTTP server on the host's
// 127.0.0.1 that the demo uses as both the service the sandbox must NOT reach
// directly and the allowlisted host it MAY reach through the egress broker.
// Keeping the target on the host's loopback means the demo never sends a
// packet off the machine, even if containment were broken.
//
// Usage: node standin.mjs PORTFILE   (picks a free port, writes it to PORTFILE)
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';

const portFile = process.argv[2];
if (!portFile) throw new Error('usage: node standin.mjs PORTFILE');

const server = createServer((req, res) => {
  console.log(`standin: ${req.method} ${req.url} (Host: ${req.headers.host})`);
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('hello from the allowlisted stand-in host\n');
});
server.listen(0, '127.0.0.1', () => {
  writeFileSync(portFile, `${server.address().port}\n`);
  console.log(`standin: listening on 127.0.0.1:${server.address().port}`);
});
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => process.exit(0));
