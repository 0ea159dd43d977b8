import { createAlbumService } from "./album.ts";
import { servedByRuntime } from "./serve.ts";

// The album service for the runtime's own server, configured from the environment:
//   bun src/library/album-serve.ts                                  (ALBUM_HOST:ALBUM_PORT)
//   deno serve --allow-net --allow-env src/library/album-serve.ts   (--host, --port)
// Installed: `llamadock/album/serve`.

export default await servedByRuntime(await createAlbumService({ env: process.env }));
